package e2e

import (
	"sync"
	"testing"
)

// TestGatewayDeadTargetFirst: a gateway whose first upstream target is
// an address where nothing listens is ready once the engine answers, and
// every request it serves right after, before its next health check, is
// served by the engine: none reaches the dead address, which no check
// has answered.
func TestGatewayDeadTargetFirst(t *testing.T) {
	if testing.Short() {
		t.Skip("builds streamgate and runs it as processes")
	}
	bin := buildStreamgate(t)
	eng := startEngineProc(t, bin, "")
	gw := startGatewayProc(t, bin, freeAddr(t)+","+eng.addr)
	c := httpClient(t)
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			if r := request(t, c, "GET", gw.url+"/v2/models/repeat_int32/config", ""); r.status != 200 {
				t.Errorf("config %d: %d %s", i, r.status, r.body)
			}
			if r := request(t, c, "POST", gw.url+"/v2/models/repeat_int32/generate", `{"IN":[7],"DELAY":[0],"WAIT":0}`); r.status != 200 {
				t.Errorf("generate %d: %d %s", i, r.status, r.body)
			}
		})
	}
	wg.Wait()
}
