#!/bin/sh
# gpu-unpack.sh BUILD - unpack BUILD/carry.tar.xz (what scripts/gpu-carry.sh
# makes: the device tool carries at most 64 MiB with the working tree) in
# place, once; nothing to do when BUILD holds the programs already. The
# gpu-*.sh scripts call it first, so any of them can be the entry point.
build=${1:?usage: gpu-unpack.sh BUILD}
if [ -f "$build/carry.tar.xz" ] && [ ! -x "$build/atlas-bench" ]; then
	tar xJf "$build/carry.tar.xz" -C "$build"
fi
