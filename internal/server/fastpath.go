package server

import (
	"net/http"
	"sync"

	fastjson "github.com/segmentio/encoding/json"

	"github.com/lockd/lockd/api"
)

// leaseOps serves a lock's acquire, renew and release, the calls of every
// lease's life, without the generated strict handler's second decode of
// the body and with a pooled encoder for the answer; every other
// operation, and these when their body was not checked, goes to the
// generated code. The request and answer types are the generated ones,
// the handlers the same (Server.AcquireLock …), the bytes on the wire
// identical: only the plumbing between them is shorter.
//
// checkBody has already decoded the body strictly into the operation's
// generated type to name a bad field (validate.go); the generated code
// then decoded the same bytes again into the same type, a tenth of the
// server's allocations on a lease's cycle (docs/performance.md).
type leaseOps struct {
	api.ServerInterface // the generated strict handler
	s                   *Server
}

func (o leaseOps) AcquireLock(w http.ResponseWriter, r *http.Request, key api.Key, params api.AcquireLockParams) {
	body, ok := checkedBody[api.AcquireLockJSONRequestBody](r)
	if !ok {
		o.ServerInterface.AcquireLock(w, r, key, params)
		return
	}
	res, err := o.s.AcquireLock(r.Context(), api.AcquireLockRequestObject{Key: key, Params: params, Body: body})
	if err == nil {
		switch v := res.(type) {
		case api.AcquireLock200JSONResponse:
			var h http.Header
			if v.Headers.IdempotentReplayed != nil {
				h = http.Header{"Idempotent-Replayed": {*v.Headers.IdempotentReplayed}}
			}
			err = writeOK(w, &v.Body, h)
		case nil:
		default:
			err = v.VisitAcquireLockResponse(w)
		}
	}
	if err != nil {
		writeError(w, r, err)
	}
}

func (o leaseOps) RenewLock(w http.ResponseWriter, r *http.Request, key api.Key) {
	body, ok := checkedBody[api.RenewLockJSONRequestBody](r)
	if !ok {
		o.ServerInterface.RenewLock(w, r, key)
		return
	}
	res, err := o.s.RenewLock(r.Context(), api.RenewLockRequestObject{Key: key, Body: body})
	if err == nil {
		switch v := res.(type) {
		case api.RenewLock200JSONResponse:
			err = writeOK(w, &v, nil)
		case nil:
		default:
			err = v.VisitRenewLockResponse(w)
		}
	}
	if err != nil {
		writeError(w, r, err)
	}
}

func (o leaseOps) ReleaseLock(w http.ResponseWriter, r *http.Request, key api.Key) {
	body, ok := checkedBody[api.ReleaseLockJSONRequestBody](r)
	if !ok {
		o.ServerInterface.ReleaseLock(w, r, key)
		return
	}
	res, err := o.s.ReleaseLock(r.Context(), api.ReleaseLockRequestObject{Key: key, Body: body})
	if err == nil {
		switch v := res.(type) {
		case api.ReleaseLock200JSONResponse:
			err = writeOK(w, &v, nil)
		case nil:
		default:
			err = v.VisitReleaseLockResponse(w)
		}
	}
	if err != nil {
		writeError(w, r, err)
	}
}

// checkedBody is the body checkBody decoded for r, as the generated code
// would have bound it. ok is false when checkBody did not decode one into
// T: no exchange, or an empty body, which the generated code answers
// itself (a 400 where the body is required, no body where it is not).
func checkedBody[T any](r *http.Request) (body *T, ok bool) {
	x := exchangeOf(r.Context())
	if x == nil || !x.bodyChecked {
		return nil, false
	}
	body, ok = x.body.(*T)
	return body, ok
}

// answers are reusable buffers for the answers of leaseOps.
var answers = sync.Pool{New: func() any { return new([]byte) }}

// writeOK writes v as a 200 application/json answer, with the extra
// headers h, byte for byte as the generated Visit…Response would
// (encoding/json's Encoder: HTML escaped, a trailing newline), then the
// headers, then the body in one write. The bytes come from
// segmentio/encoding's json, which writes what encoding/json writes
// (TestAnswerBytes) five times faster and without allocating.
func writeOK(w http.ResponseWriter, v any, h http.Header) error {
	buf := answers.Get().(*[]byte)
	defer func() {
		if cap(*buf) <= 16<<10 {
			answers.Put(buf)
		}
	}()
	b, err := fastjson.Append((*buf)[:0], v, fastjson.EscapeHTML)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	*buf = b
	wh := w.Header()
	wh["Content-Type"] = contentTypeJSON
	for k, v := range h {
		wh[k] = v
	}
	w.WriteHeader(http.StatusOK)
	_, err = w.Write(b)
	return err
}

// contentTypeJSON is shared by every answer of writeOK: net/http only
// reads a header's values.
var contentTypeJSON = []string{"application/json"}
