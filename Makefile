# Atlas build. `make` builds build/libatlas.a and the programs in build/;
# `make test` runs every test; `make install PREFIX=...` installs.
#
# Variables:
#   PREFIX        install prefix (default /usr/local)
#   STATIC_DEPS=1 link json-c and PCRE2 statically (for carrying binaries
#                 to a machine without their -dev packages)
#   ATLAS_TARGETS narrow the CUDA kernel targets (later issue)

CC      ?= gcc
PREFIX  ?= /usr/local
BUILD   ?= build
VERSION := $(shell cat VERSION 2>/dev/null || echo 0.0.0)
GIT_REV := $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)

WARN    := -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter -Wno-format-truncation
CFLAGS  ?= -O2 -g
ALL_CFLAGS := -std=c11 -D_GNU_SOURCE $(WARN) $(CFLAGS) -pthread -fPIC \
	-DATLAS_VERSION='"$(VERSION)"' -DATLAS_GIT_REV='"$(GIT_REV)"' \
	$(shell pkg-config --cflags json-c libpcre2-8 2>/dev/null)

ifeq ($(STATIC_DEPS),1)
DEP_LIBS := -Wl,-Bstatic -ljson-c -lpcre2-8 -Wl,-Bdynamic
else
DEP_LIBS := $(shell pkg-config --libs json-c libpcre2-8 2>/dev/null || echo -ljson-c -lpcre2-8)
endif
LDLIBS  := $(DEP_LIBS) -lreadline -lm -pthread

LIB_SRC := $(sort $(wildcard lib/*/*.c lib/backend/*/*.c))
LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
CMD_SRC := $(sort $(wildcard cmd/atlas-*.c))
PROGS   := $(CMD_SRC:cmd/%.c=$(BUILD)/%)
CMD_COMMON := $(BUILD)/obj/cmd/common.o
UNIT_SRC := $(sort $(wildcard tests/unit/test-*.c))
UNITS   := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/%)
HARNESS := $(BUILD)/obj/tests/unit/harness.o

.PHONY: all lib progs tests test install uninstall clean lint fuzz
# keep objects of pattern-built programs (make would delete them, and print so)
.SECONDARY:
all: lib progs

lib: $(BUILD)/libatlas.a
progs: $(PROGS)

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -MMD -MP -c $< -o $@

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

# The one test command (README and .ci/run use it): unit tests, golden
# tests, bats tests of every program; ends with "N passed, N failed".
test: tests
	@tests/run-all $(BUILD)

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

# libFuzzer targets (needs clang); see tests/fuzz/README. FUZZ_TIME seconds.
FUZZ_TIME ?= 60
fuzz:
	@mkdir -p $(BUILD)/fuzz/corpus-st
	clang -std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined \
		$$(pkg-config --cflags json-c) -o $(BUILD)/fuzz/fuzz-safetensors \
		tests/fuzz/fuzz-safetensors.c lib/core/*.c lib/io/safetensors.c \
		lib/io/json_util.c lib/io/file.c $$(pkg-config --libs json-c) -lm -pthread
	cp tests/fixtures/golden/qwen3/model.safetensors $(BUILD)/fuzz/corpus-st/seed-qwen3
	$(BUILD)/fuzz/fuzz-safetensors -max_len=4096 -max_total_time=$(FUZZ_TIME) $(BUILD)/fuzz/corpus-st

clean:
	rm -rf $(BUILD)

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
