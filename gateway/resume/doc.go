// Package resume makes streams resumable across gateway replicas, on a
// store.Streams (Redis shared by the replicas, or one process's memory).
// It knows nothing of wire formats: it logs payloads (the bytes of each
// event as the route sends them) and gives them back in order.
//
// Start with New, one Manager per gateway. The replica that runs a
// resumable request calls Manager.Start to get a Producer: Append each
// event's payload (its id is 1, 2, 3 …), Flush after each batch the live
// client was sent, Detach when the live client leaves, and Close with how
// the stream ended. A Producer's log is written behind the live client by
// one writer goroutine, so the live client never waits for the store: it
// gathers what is flushed for Options.FlushInterval and writes it in one
// pipelined round trip, a few round trips a second per stream however
// fast its events come. The bytes waiting for the store are bounded per
// stream (Options.MaxPending) and across streams (Options.Memory); past
// either bound the stream stops being resumable and its live client
// streams on. The producer holds a lease on
// the stream, renewed every Lease/3 (with the batch due then, or alone
// when the stream is quiet), when it also learns of cancels and readers.
//
// Any replica reads a stream with Manager.Open and Reader.Next: the
// stored events after a given id, then the live ones as they are written,
// then the end event. A stream whose producer is gone (its lease ran out
// with no end event, and stayed out for another lease: a hung store
// outlives leases) ends with ErrLost after its stored events; nothing
// is invented or repeated.
//
// Manager.Cancel cancels a stream from any replica: the producing
// replica hears it at once (store.Streams.WatchCancels; the Manager
// listens while it has producers) and calls the Producer's cancel
// function with ErrCancelled. A detached Producer whose stream nobody
// reads (Reader.Next notes each reader in the store) calls it with
// ErrAbandoned once Options.Grace has passed.
//
// # Goroutines
//
// Each Producer runs one writer goroutine, from Start until Close returns.
// The Manager runs one goroutine that listens for cancels while it has at
// least one Producer; the last Producer's Close stops it and waits for
// it. Nothing runs once every Producer is closed. All methods may be
// called concurrently, except that a Producer's Append, Flush and Close
// belong to the one goroutine that produces the stream.
package resume
