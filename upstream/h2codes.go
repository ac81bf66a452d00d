package upstream

import (
	"strconv"
	"strings"

	"golang.org/x/net/http2"
	"google.golang.org/grpc/codes"
)

// h2Code maps an RST_STREAM error code to the gRPC code grpc-go gives it.
func h2Code(c http2.ErrCode) codes.Code {
	switch c {
	case http2.ErrCodeRefusedStream:
		return codes.Unavailable
	case http2.ErrCodeCancel:
		return codes.Canceled
	case http2.ErrCodeFlowControl, http2.ErrCodeEnhanceYourCalm:
		return codes.ResourceExhausted
	case http2.ErrCodeInadequateSecurity:
		return codes.PermissionDenied
	}
	return codes.Internal
}

// httpCode maps a non-200 HTTP status without grpc-status as gRPC does.
func httpCode(s int) codes.Code {
	switch s {
	case 400:
		return codes.Internal
	case 401:
		return codes.Unauthenticated
	case 403:
		return codes.PermissionDenied
	case 404:
		return codes.Unimplemented
	case 429, 502, 503, 504:
		return codes.Unavailable
	}
	return codes.Unknown
}

// decodeGRPCMessage undoes grpc-message's percent-encoding.
func decodeGRPCMessage(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+3], 16, 8); err == nil {
				b.WriteByte(byte(v))
				i += 2
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
