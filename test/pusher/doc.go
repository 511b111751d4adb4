// Package pusher tests wsgate with the real Pusher clients: pusher-js (its
// Node build, driven by Node's test runner, and its browser build in
// headless Chromium), Laravel Echo over pusher-js, and the `pusher` server
// library on the Pusher HTTP API, against gateway processes on Redis. The
// npm packages are pinned in package-lock.json; `npm ci` here (make test
// runs it) installs them.
package pusher
