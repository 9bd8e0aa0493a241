// Package hostinfo names the machine a measurement ran on: its CPU model
// and count, from /proc/cpuinfo. Every benchmark result carries it,
// because a figure means nothing without its machine, and the shared VMs
// this project is measured on change hosts (a session's "dev VM" has been
// an Intel Xeon one day and an AMD EPYC the next, 1.7x apart on the same
// code).
package hostinfo
