// sse.js: reading a text/event-stream body from fetch(), by the parsing
// rules of the HTML standard (the fields streamgate sends: id, data and
// comments such as ": keepalive").

// sseEvents yields {id, data, at} for each event of a fetch Response body,
// at being performance.now() when the event's blank line arrived. id is
// the last id seen so far, as EventSource's lastEventId. It throws if the
// body ends inside an event (a cut connection).
async function* sseEvents(body) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  let id = "";
  let data = null; // lines of the event being read, null before its first data line
  let fields = false; // the event being read has had a field
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) {
        if (fields || buf !== "") throw new Error("the stream ended inside an event");
        return;
      }
      buf += value;
      const at = performance.now();
      for (;;) {
        const nl = buf.search(/\r\n|\r|\n/);
        if (nl < 0) break;
        // A lone \r at the end of buf may be the first half of \r\n.
        if (buf[nl] === "\r" && nl === buf.length - 1) break;
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + (buf.startsWith("\r\n", nl) ? 2 : 1));
        if (line === "") {
          if (data !== null) yield { id, data: data.join("\n"), at };
          data = null;
          fields = false;
          continue;
        }
        if (line.startsWith(":")) continue; // a comment
        const colon = line.indexOf(":");
        const name = colon < 0 ? line : line.slice(0, colon);
        let value = colon < 0 ? "" : line.slice(colon + 1);
        if (value.startsWith(" ")) value = value.slice(1);
        fields = true;
        if (name === "data") (data ??= []).push(value);
        else if (name === "id" && !value.includes("\0")) id = value;
      }
    }
  } finally {
    reader.releaseLock();
  }
}
