// Package daemon is warpflowd: it reads the daemon's config, loads the
// pipeline, attaches the XDP program to every receiving interface, opens
// one AF_XDP queue (dataplane/afxdp) per served receive queue with an
// engine of its own, and runs them until its context is cancelled
// (SIGINT/SIGTERM in cmd/warpflowd). It then drains every engine, closes
// the sockets, detaches the programs and returns.
//
// It watches the interfaces it uses (a netlink link subscription, and each
// socket's error, since poll never reports a deleted interface): a lost
// interface is logged with its name, counted, and either stops the daemon
// (on_link_loss: exit) or only the queues that used it (continue).
//
// Setup failures come back as one error line that names the cause and the
// fix (a missing interface, a missing capability, a kernel without AF_XDP,
// a queue another process holds), with everything made so far undone.
package daemon
