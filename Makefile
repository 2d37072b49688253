# Atlas build. `make` builds build/libatlas.a and the programs in build/;
# `make test` runs every test; `make install PREFIX=...` installs.
#
# Variables:
#   PREFIX        install prefix (default /usr/local)
#   STATIC_DEPS=1 link json-c, PCRE2 and libmicrohttpd statically (for carrying binaries
#                 to a machine without their -dev packages); libcurl
#                 stays dynamic
#   ATLAS_TARGETS narrow the CUDA kernel targets, e.g. "sm90/common"
#                 (default: every target in kernels/; see scripts/build-kernels.sh)
#   NVCC          the CUDA compiler (default: nvcc on PATH; empty = CPU-only build)
#   SAN=1         a CPU-only gcc build with AddressSanitizer and UBSan in build-san/
#                 (`make test SAN=1` runs the tests with its programs)
#   TESTS         what `make test` runs (default: everything); parts of
#                 tests/run-all: unit, tokverify, clients, bats files
#   FUZZ_S        seconds per harness for `make fuzz` (default 30)

CC      ?= gcc
PREFIX  ?= /usr/local

# Sanitizer builds live in their own build folders and never use nvcc:
# SAN=1 is gcc with ASan + UBSan (the tests' programs), FUZZ=1 is clang
# with libFuzzer's instrumentation (the library under tests/fuzz/; `make
# fuzz` sets it). Any UB report is fatal, so a test sees it as a failure.
# A SAN build folder keeps a .san stamp, so that a later `make
# BUILD=build-san ...` without SAN=1 (tests/t/2040 runs make install so)
# builds it the same way.
ifeq ($(SAN),1)
BUILD   ?= build-san
endif
ifeq ($(FUZZ),1)
BUILD   ?= build-fuzz
endif
BUILD   ?= build
ifneq ($(wildcard $(BUILD)/.san),)
SAN     := 1
endif
SAN_FLAGS := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
ifeq ($(SAN),1)
NVCC    :=
CFLAGS  ?= -O1 -g
SAN_CFLAGS := $(SAN_FLAGS)
$(shell mkdir -p $(BUILD) && touch $(BUILD)/.san)
endif
ifeq ($(FUZZ),1)
CC      := $(or $(shell command -v clang-14 2>/dev/null),clang)
NVCC    :=
CFLAGS  ?= -O1 -g
SAN_CFLAGS := $(SAN_FLAGS) -fsanitize=fuzzer-no-link -Wno-unknown-warning-option
endif
VERSION := $(shell cat VERSION 2>/dev/null || echo 0.0.0)
GIT_REV := $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)

WARN    := -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter -Wno-format-truncation
CFLAGS  ?= -O2 -g
ALL_CFLAGS := -std=c11 -D_GNU_SOURCE $(WARN) $(CFLAGS) $(SAN_CFLAGS) -pthread -fPIC \
	-DATLAS_VERSION='"$(VERSION)"' -DATLAS_GIT_REV='"$(GIT_REV)"' \
	$(shell pkg-config --cflags json-c libpcre2-8 libcurl libmicrohttpd 2>/dev/null)

ifeq ($(STATIC_DEPS),1)
DEP_LIBS := -Wl,-Bstatic -ljson-c -lpcre2-8 -lmicrohttpd -Wl,-Bdynamic -lgnutls -lcurl
else
DEP_LIBS := $(shell pkg-config --libs json-c libpcre2-8 libcurl libmicrohttpd 2>/dev/null || echo -ljson-c -lpcre2-8 -lcurl -lmicrohttpd)
endif
LDLIBS  := $(DEP_LIBS) -lreadline -ldl -lm -pthread

# CUDA: with nvcc the kernels are compiled into fatbins embedded in the
# library, the CUDA backend is built, and programs link the static CUDA
# runtime (which finds the driver at run time, so they still start on a
# machine without one). Without nvcc the build is CPU-only.
NVCC    ?= $(shell command -v nvcc 2>/dev/null)
ifneq ($(NVCC),)
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(realpath $(NVCC)))
HAVE_CUDA := 1
CUDA_CFLAGS := -I$(CUDA_HOME)/include -DATLAS_HAVE_CUDA
LDLIBS  += $(CUDA_HOME)/lib64/libcudart_static.a -ldl -lrt
endif

LIB_SRC := $(sort $(wildcard lib/*/*.c lib/backend/*/*.c))
ifneq ($(HAVE_CUDA),1)
LIB_SRC := $(filter-out lib/backend/cuda/%,$(LIB_SRC))
endif
LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/obj/%.o) $(BUILD)/obj/kernels/registry.o \
	$(BUILD)/obj/kernels/registry_data.o
CMD_SRC := $(sort $(wildcard cmd/atlas-*.c))
PROGS   := $(CMD_SRC:cmd/%.c=$(BUILD)/%)
CMD_COMMON := $(BUILD)/obj/cmd/common.o
UNIT_SRC := $(sort $(wildcard tests/unit/test-*.c))
UNITS   := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/%)
HARNESS := $(BUILD)/obj/tests/unit/harness.o

.PHONY: all lib progs tests test install uninstall clean lint fuzz fuzz-build fuzz-run gpu-tests gpu-test
# keep objects of pattern-built programs (make would delete them, and print so)
.SECONDARY:
all: lib progs

lib: $(BUILD)/libatlas.a
progs: $(PROGS)

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -MMD -MP -c $< -o $@

# The kernel registry: scripts/build-kernels.sh runs every time (it only
# recompiles a target whose sources changed and only rewrites the
# registry files when they change, so objects rebuild only then).
.PHONY: FORCE
$(BUILD)/kernels/registry.c $(BUILD)/kernels/registry.S &: FORCE
	@NVCC="$(NVCC)" ATLAS_TARGETS="$(ATLAS_TARGETS)" scripts/build-kernels.sh $(BUILD)/kernels

$(BUILD)/obj/kernels/registry.o: $(BUILD)/kernels/registry.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -c $< -o $@

$(BUILD)/obj/kernels/registry_data.o: $(BUILD)/kernels/registry.S
	@mkdir -p $(dir $@)
	$(CC) -c $< -o $@

$(BUILD)/obj/lib/backend/cuda/%.o $(BUILD)/obj/lib/backend/backend.o $(BUILD)/obj/tests/%.o: ALL_CFLAGS += $(CUDA_CFLAGS)

# The CPU matmul kernels are the hot path: let the compiler vectorize them.
$(BUILD)/obj/lib/backend/cpu/%.o: ALL_CFLAGS += -O3

$(BUILD)/libatlas.a: $(LIB_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@
	ar rcs $@ $^

$(BUILD)/atlas-%: $(BUILD)/obj/cmd/atlas-%.o $(CMD_COMMON) $(BUILD)/libatlas.a
	$(CC) $(ALL_CFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/tests/test-%: $(BUILD)/obj/tests/unit/test-%.o $(HARNESS) $(BUILD)/libatlas.a
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -o $@ $^ $(LDLIBS)

tests: all $(UNITS)

# The tokenizer verification driver that tests/tokverify/run (part of
# make test) compares with the JS reference implementation.
tests: $(BUILD)/tests/tokverify
$(BUILD)/tests/tokverify: $(BUILD)/obj/tests/tokverify/tokverify.o $(BUILD)/libatlas.a
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -o $@ $^ $(LDLIBS)

# GPU tests (need a GPU to run; build anywhere with nvcc): make gpu-test OUT=DIR
GPU_TESTS := $(patsubst tests/gpu/%.c,$(BUILD)/tests/gpu/%,$(wildcard tests/gpu/test-*.c))
$(BUILD)/tests/gpu/test-%: $(BUILD)/obj/tests/gpu/test-%.o $(HARNESS) $(BUILD)/libatlas.a
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -o $@ $^ $(LDLIBS)

gpu-tests: tests $(GPU_TESTS)

OUT ?= gpu-test-out
gpu-test: gpu-tests
	scripts/gpu-test.sh $(OUT) $(BUILD)

# The one test command (README and .ci/run use it): unit tests, golden
# tests, bats tests of every program; ends with "N passed, N failed".
# Under SAN=1 the tests see ATLAS_SAN=1 (tests that time or measure
# memory skip themselves) and every sanitizer report fails the program.
ifeq ($(SAN),1)
TEST_ENV := ATLAS_SAN=1 ASAN_OPTIONS=abort_on_error=1:detect_leaks=1 \
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
endif
test: tests
	@$(TEST_ENV) tests/run-all $(BUILD) $(TESTS)

install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/man/man1 \
		$(DESTDIR)$(PREFIX)/share/bash-completion/completions \
		$(DESTDIR)$(PREFIX)/share/zsh/site-functions \
		$(DESTDIR)$(PREFIX)/share/atlas/models/default
	install -m 755 $(PROGS) $(DESTDIR)$(PREFIX)/bin/
	install -m 644 man/*.1 $(DESTDIR)$(PREFIX)/share/man/man1/
	for f in completions/bash/*; do \
		install -m 644 $$f $(DESTDIR)$(PREFIX)/share/bash-completion/completions/; done
	for f in completions/zsh/*; do \
		install -m 644 $$f $(DESTDIR)$(PREFIX)/share/zsh/site-functions/; done
	install -m 644 models/default/* $(DESTDIR)$(PREFIX)/share/atlas/models/default/

uninstall:
	rm -f $(PROGS:$(BUILD)/%=$(DESTDIR)$(PREFIX)/bin/%)
	rm -rf $(DESTDIR)$(PREFIX)/share/atlas

lint:
	clang-format --dry-run -Werror $$(git diff --name-only HEAD -- '*.c' '*.h') 2>/dev/null || true
	cppcheck --quiet --enable=warning,portability --std=c11 --error-exitcode=1 \
		--suppress=missingIncludeSystem lib cmd

# libFuzzer harnesses: every tests/fuzz/fuzz-NAME.c is linked against a
# clang-built CPU-only libatlas in build-fuzz/ into build-fuzz/fuzz-NAME,
# then run for FUZZ_S seconds each, one after another, on a copy of its
# seeds tests/fuzz/corpus/NAME/ (the repository's corpus is not written);
# tests/fuzz/NAME.dict is used as its dictionary when present. Fails if
# any harness finds a crash, leak, timeout or sanitizer report; the
# reproducer is left in build-fuzz/artifacts/NAME/. See tests/fuzz/README.
FUZZ_S  ?= 30
FUZZ_SRC := $(sort $(wildcard tests/fuzz/fuzz-*.c))
FUZZ_BINS := $(FUZZ_SRC:tests/fuzz/%.c=$(BUILD)/%)

ifeq ($(FUZZ),1)
$(BUILD)/fuzz-%: tests/fuzz/fuzz-%.c $(BUILD)/libatlas.a
	$(CC) $(ALL_CFLAGS) -fsanitize=fuzzer -o $@ $^ $(LDLIBS)

fuzz-build: $(FUZZ_BINS)

fuzz-run: fuzz-build
	@failed=""; \
	for h in $(FUZZ_BINS); do \
		name=$${h##*/fuzz-}; work=$(BUILD)/corpus/$$name; art=$(BUILD)/artifacts/$$name; \
		rm -rf "$$work"; mkdir -p "$$work" "$$art"; \
		[ -d tests/fuzz/corpus/$$name ] && cp -R tests/fuzz/corpus/$$name/. "$$work"/; \
		dict=""; [ -f tests/fuzz/$$name.dict ] && dict=-dict=tests/fuzz/$$name.dict; \
		echo "fuzz: $$name for $(FUZZ_S) s"; \
		if $$h -max_total_time=$(FUZZ_S) -timeout=10 -rss_limit_mb=2048 \
			-print_final_stats=1 -artifact_prefix=$$art/ $$dict "$$work" \
			>$(BUILD)/fuzz-$$name.log 2>&1; then \
			grep -E 'DONE' $(BUILD)/fuzz-$$name.log | tail -2; \
		else \
			tail -40 $(BUILD)/fuzz-$$name.log; failed="$$failed $$name"; \
		fi; \
	done; \
	if [ -n "$$failed" ]; then echo "fuzz: crashes in:$$failed (see $(BUILD)/artifacts/)"; exit 1; fi; \
	echo "fuzz: $(words $(FUZZ_BINS)) harnesses, no findings"
endif

fuzz:
	@$(MAKE) --no-print-directory FUZZ=1 fuzz-run

clean:
	rm -rf $(BUILD)

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
