package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/streamgate/streamgate/proto/inferencepb"
)

// needsSameServer reports whether runs compare the direct baseline with
// a transport through the gateway: the comparison only means something
// when both reach the same engine.
func needsSameServer(runs []plannedRun) bool {
	direct, gateway := false, false
	for _, r := range runs {
		if r.transport == "direct" {
			direct = true
		} else {
			gateway = true
		}
	}
	return direct && gateway
}

// verifySameServer checks that the gateway at httpAddr relays to the
// engine at grpcAddr before anything is measured: the ServerMetadata both
// answer must be the same, and a nonce must cross: a random number (2 to
// 7) of one-response requests sent through the gateway must show in the
// engine's ModelStatistics read over gRPC. Other traffic to the same
// model could hide a mismatch only by adding as many requests in the same
// second. A mismatch is an *errNotSame; any other error means the check
// could not be made (a server unreachable: the runs will show it).
func verifySameServer(ctx context.Context, httpAddr, grpcAddr string, runs []plannedRun) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	engine := pb.NewGRPCInferenceServiceClient(conn)
	base := "http://" + httpAddr

	md, err := engine.ServerMetadata(ctx, &pb.ServerMetadataRequest{})
	if err != nil {
		return fmt.Errorf("verify: ServerMetadata from --grpc %s: %w", grpcAddr, err)
	}
	var wl workload
	for _, r := range runs {
		if r.transport != "direct" {
			wl = r.wl
			break
		}
	}
	client := newHTTPClient(1, wl.APIKey)
	defer client.CloseIdleConnections()
	var relayed struct {
		Name       string   `json:"name"`
		Version    string   `json:"version"`
		Extensions []string `json:"extensions"`
	}
	if err := getJSON(ctx, client, base+"/v2", &relayed); err != nil {
		return fmt.Errorf("verify: GET /v2 from --http %s: %w", httpAddr, err)
	}
	if relayed.Name != md.GetName() || relayed.Version != md.GetVersion() || !slices.Equal(relayed.Extensions, md.GetExtensions()) {
		return &errNotSame{fmt.Sprintf("the gateway relays %s %s %v, the engine is %s %s %v",
			relayed.Name, relayed.Version, relayed.Extensions, md.GetName(), md.GetVersion(), md.GetExtensions()), httpAddr, grpcAddr}
	}

	wl.Responses, wl.Delay = 1, 0
	count := func() (uint64, error) {
		st, err := engine.ModelStatistics(ctx, &pb.ModelStatisticsRequest{Name: wl.Model})
		if err != nil {
			return 0, err
		}
		var n uint64
		for _, m := range st.GetModelStats() {
			n += m.GetInferenceStats().GetSuccess().GetCount()
		}
		return n, nil
	}
	before, err := count()
	if err != nil {
		return fmt.Errorf("verify: ModelStatistics(%s) from --grpc %s: %w", wl.Model, grpcAddr, err)
	}
	nonce := 2 + rand.IntN(6)
	for i := range nonce {
		if err := post(ctx, client, base+"/v2/models/"+wl.Model+"/generate_stream", wl.generateBody(int32(i))); err != nil {
			return fmt.Errorf("verify: a request through --http %s: %w", httpAddr, err)
		}
	}
	for deadline := time.Now().Add(2 * time.Second); ; {
		after, err := count()
		if err != nil {
			return err
		}
		if after >= before+uint64(nonce) {
			return nil
		}
		if time.Now().After(deadline) {
			return &errNotSame{fmt.Sprintf("%d requests sent through the gateway, the engine counted %d", nonce, after-before), httpAddr, grpcAddr}
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// errNotSame is the proof that --http and --grpc are different servers.
type errNotSame struct{ why, http, grpc string }

func (e *errNotSame) Error() string {
	return "verify: --http " + e.http + " and --grpc " + e.grpc + " are different servers: " + e.why
}

func getJSON(ctx context.Context, client *http.Client, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s", resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// post sends one request and reads its answer to the end.
func post(ctx context.Context, client *http.Client, url string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK || bytes.Contains(b, []byte(`"error"`)) {
		return fmt.Errorf("%s: %.200s", resp.Status, b)
	}
	return nil
}
