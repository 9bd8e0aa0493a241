package xdp

// The Debian multiarch include directories hold asm/types.h, which
// linux/bpf.h needs; a missing one is ignored by clang.
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -no-global-types -target bpfel -cflags "-O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu -I/usr/include/aarch64-linux-gnu" -strip llvm-strip xskRedirect xsk_redirect.c
