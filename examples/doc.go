// Package examples holds lockd's client examples, each run by this
// package's tests against a real server:
//
//   - run.sh: a bash job under `lockd run`;
//   - hold.sh: the same with plain curl on the /hold event stream;
//   - renew.py: Python 3, standard library only, renewing by hand;
//   - renew.mjs: Node 18+, built-in fetch, renewing by hand;
//   - webhook/: a Go webhook handler that processes each delivery once;
//   - webhook-receiver/ and webhook_receiver.py: endpoints for lockd's own
//     webhooks (--webhooks-file) in Go and Python that verify the
//     Lockd-Signature and deduplicate by the signed body's id.
package examples
