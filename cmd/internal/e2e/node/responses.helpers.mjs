// Helpers of the Responses tests (responses.test.mjs and
// responses.replicas.test.mjs).
import assert from 'node:assert/strict';

// cutAfter streams a new background response and leaves after n deltas:
// its id, the text so far and the sequence_number of the last event read.
export async function cutAfter(c, params, n) {
  const stream = await c.responses.create({ ...params, background: true, stream: true });
  let id, last, text = '', deltas = 0;
  for await (const e of stream) {
    if (e.type === 'response.created') id = e.response.id;
    last = e.sequence_number;
    if (e.type === 'response.output_text.delta') {
      text += e.delta;
      if (++deltas === n) break; // leaving the loop aborts the request
    }
  }
  assert.equal(deltas, n, 'the response ended before the cut');
  return { id, text, last };
}

// resumeText reads the rest of response id after sequence number last.
export async function resumeText(c, id, last) {
  const rest = await c.responses.retrieve(id, { stream: true, starting_after: last });
  let text = '';
  let terminal;
  for await (const e of rest) {
    assert.equal(e.sequence_number, ++last);
    if (e.type === 'response.output_text.delta') text += e.delta;
    terminal = e.type;
  }
  assert.ok(['response.completed', 'response.incomplete'].includes(terminal), `ended with ${terminal}`);
  return text;
}
