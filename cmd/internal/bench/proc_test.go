package bench

import (
	"net"
	"os"
	"slices"
	"testing"
)

func TestListeningInodes(t *testing.T) {
	table := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 111 1 0 100 0 0 10 0
   1: 0100007F:1F41 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 222 1 0 100 0 0 10 0
   2: 0100007F:1F90 0100007F:D2F0 01 00000000:00000000 00:00000000 00000000     0        0 333 1 0 100 0 0 10 0
`
	if got := listeningInodes([]byte(table), 8080); !slices.Equal(got, []string{"111"}) {
		t.Errorf("port 8080: %v", got)
	}
	if got := listeningInodes([]byte(table), 8001); !slices.Equal(got, []string{"222"}) {
		t.Errorf("port 8001: %v", got)
	}
}

func TestFindListeners(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	pids, err := findListeners(lis.Addr().String())
	if err != nil || !slices.Contains(pids, os.Getpid()) {
		t.Errorf("findListeners = %v, %v; want this process", pids, err)
	}
}
