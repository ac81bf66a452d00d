package core

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// A hijack that fails records nothing: the status the handler writes
// next is the one counted, not 101.
func TestStatusWriterFailedHijack(t *testing.T) {
	sw := &statusWriter{ResponseWriter: httptest.NewRecorder()} // cannot hijack
	if _, _, err := sw.Hijack(); err == nil {
		t.Fatal("hijacked a recorder")
	}
	sw.WriteHeader(http.StatusInternalServerError)
	if sw.status != http.StatusInternalServerError {
		t.Fatalf("status %d, want 500", sw.status)
	}
}
