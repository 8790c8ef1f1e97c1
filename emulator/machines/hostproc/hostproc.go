// Package hostproc starts the host processes a simulated machine runs
// (the real control-plane binaries, metrics-server) so that none outlives
// the emulator, and signals them as a kubelet signals a container: the
// whole process group. The local world runs on Linux, where the kernel
// kills a child whose parent died (PR_SET_PDEATHSIG); elsewhere winkube
// still builds (the kubectl plugin's darwin and windows archives carry the
// same binary) with what the system offers.
package hostproc
