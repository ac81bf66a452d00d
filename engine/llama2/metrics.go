package llama2

// report tells the engine (backend.Config.Metrics) what the forward pass
// just run did: the sequences in it, the prompt rows it fed and the
// tokens it sampled.
func (sc *scheduler) report() {
	var seqs, prompt, generated int
	for i, st := range sc.steps {
		s := sc.owners[i]
		if i == 0 || s != sc.owners[i-1] { // a sequence's rows are adjacent
			seqs++
		}
		if st.Pos < len(s.prompt) {
			prompt++
		}
		if st.Logits != nil {
			generated++
		}
	}
	sc.b.metrics.Step(seqs, prompt, generated)
}
