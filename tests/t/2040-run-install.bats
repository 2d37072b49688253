#!/usr/bin/env bats
# make install puts the program, man page, completions and the default
# model under PREFIX, and the installed program finds its default model.

load test_helper

@test "make install PREFIX=... installs a working atlas-run" {
	prefix="$BATS_TEST_TMPDIR/prefix"
	run make -C "$ATLAS_SRC" BUILD="$ATLAS_BUILD" install PREFIX="$prefix"
	[ "$status" -eq 0 ]
	[ -x "$prefix/bin/atlas-run" ]
	[ -f "$prefix/share/man/man1/atlas-run.1" ]
	[ -f "$prefix/share/bash-completion/completions/atlas-run" ]
	[ -f "$prefix/share/zsh/site-functions/_atlas-run" ]
	[ -f "$prefix/share/atlas/models/default/model.safetensors" ]
	# the installed binary, away from the source tree, finds the installed model
	cd "$BATS_TEST_TMPDIR"
	run env -u ATLAS_DEFAULT_MODEL "$prefix/bin/atlas-run" -p hi -n 3 -q -v
	[ "$status" -eq 0 ]
	[[ "$output" == *"$prefix/share/atlas/models/default"* ]]
}
