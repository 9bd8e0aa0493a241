// Command warpflowd runs the Warpflow dataplane on live interfaces: an XDP
// program steers each served receive queue into an AF_XDP socket, and one
// engine per queue runs the pipeline on the frames in place.
//
//	warpflowd --config /etc/warpflow/warpflowd.yaml
//	warpflowd --pipeline fwd.yaml --iface dp0 --iface dp1,rx=false --port out0=dp1
//
// It runs until SIGINT or SIGTERM, then drains, detaches and exits 0. Exit
// codes: 0 clean stop, 1 failure (setup, a lost interface under
// on_link_loss: exit, or under continue no queue left to serve), 2 usage
// or config error.
package main
