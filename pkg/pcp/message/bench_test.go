package message

import "testing"

// A pxp-agent run request as pcp-broker delivers it (a few hundred bytes).
var (
	benchV1 = frame(env, `{"id":"3c1d0f0e-8a7b-4f3e-9d2c-5b6a7e8f9a01","message_type":"http://puppetlabs.com/rpc_non_blocking_request","targets":["pcp://node1.example.com/agent"],"expires":"2026-11-26T04:35:00.000Z","sender":"pcp://farm.example.com/controller"}`,
		data, `{"transaction_id":"5f7e3a2b-1c4d-4e6f-8a9b-0c1d2e3f4a5b","notify_outcome":true,"module":"pxp-module-puppet","action":"run","params":{"env":[],"flags":["--no-noop","--environment","production"]}}`,
		debug, `{"hops":[{"server":"pcp://farm.example.com/server","time":"2026-11-26T04:34:59.512Z","stage":"accepted"}]}`)
	benchV2 = []byte(`{"id":"3c1d0f0e-8a7b-4f3e-9d2c-5b6a7e8f9a01","message_type":"http://puppetlabs.com/rpc_non_blocking_request","target":"pcp://node1.example.com/agent","sender":"pcp://farm.example.com/controller","data":{"transaction_id":"5f7e3a2b-1c4d-4e6f-8a9b-0c1d2e3f4a5b","notify_outcome":true,"module":"pxp-module-puppet","action":"run","params":{"env":[],"flags":["--no-noop","--environment","production"]}}}`)
)

func BenchmarkDecodeV1(b *testing.B) {
	b.SetBytes(int64(len(benchV1)))
	for b.Loop() {
		if _, err := DecodeV1(benchV1); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncodeV1(b *testing.B) {
	m, err := DecodeV1(benchV1)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(benchV1)))
	buf := make([]byte, 0, 1024)
	for b.Loop() {
		if _, err := (Codec{}).AppendV1(buf[:0], m); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeV2(b *testing.B) {
	b.SetBytes(int64(len(benchV2)))
	for b.Loop() {
		if _, err := DecodeV2(benchV2); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncodeV2(b *testing.B) {
	m, err := DecodeV2(benchV2)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(benchV2)))
	buf := make([]byte, 0, 1024)
	for b.Loop() {
		if _, err := (Codec{}).AppendV2(buf[:0], m); err != nil {
			b.Fatal(err)
		}
	}
}
