# uswap build. `make` builds build/libuswap.{so,a}, build/uswap and uswap.pc; `make check` runs the tests.
# Variants: make SAN=address,undefined check | make SAN=thread check | make DEBUG=1 check (build-debug/)
# Sources are picked up by directory, so a new backend or test is a new file, not a Makefile edit.

PREFIX ?= /usr/local
DESTDIR ?=
VERSION := 0.1.0
CC ?= cc
BUILD ?= build
comma := ,

PKGS := liblz4 libzstd liburing hiredis libsodium openssl
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS))
PKG_LIBS := $(shell pkg-config --libs $(PKGS))

OPT ?= -O2
# initial-exec TLS: a thread's first touch of a dynamic TLS variable (general-dynamic, what -fPIC gives)
# makes glibc allocate its block with malloc, which under the preload library is registered memory: a
# program thread doing that inside the library (a region added under tbl_lock, a SIGBUS-mode fault)
# waited for a fault handler that waited for that lock (test_run.threads hung, 1 run in ~25).
CFLAGS_BASE := -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -g $(OPT) -fPIC -pthread -ftls-model=initial-exec \
	-Iinclude -Isrc $(PKG_CFLAGS)
LIBS := $(PKG_LIBS) -pthread -lm -ldl

ifneq ($(SAN),)
CFLAGS_BASE += -fsanitize=$(SAN) -fno-omit-frame-pointer -fno-sanitize-recover=all
LDSAN := -fsanitize=$(SAN)
override BUILD := $(BUILD)-$(subst $(comma),-,$(SAN))
endif
# DEBUG=1: the invariant walkers (mm_validate(), uswap_debug_validate(), the zpool's) are compiled in
# and every test runs them before it destroys a layer or an instance. Objects of their own directory:
# a DEBUG object never mixes with a plain one.
ifneq ($(DEBUG),)
CFLAGS_BASE += -DUSWAP_DEBUG=$(DEBUG)
override BUILD := $(BUILD)-debug
endif
CFLAGS_ALL := $(CFLAGS_BASE) $(CFLAGS)

LIB_SRC := $(wildcard src/util/*.c src/core/*.c src/backend/*.c src/mm/*.c)
CLI_SRC := $(wildcard src/cli/*.c)
PRELOAD_SRC := $(wildcard src/preload/*.c)
BENCH_SRC := $(wildcard bench/*.c)
TEST_SRC := $(wildcard tests/test_*.c)
SOAK_SRC := tests/soak.c
TEST_LIB_SRC := $(filter-out $(TEST_SRC) $(SOAK_SRC),$(wildcard tests/*.c))

LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
CLI_OBJ := $(CLI_SRC:%.c=$(BUILD)/obj/%.o)
PRELOAD_OBJ := $(PRELOAD_SRC:%.c=$(BUILD)/obj/%.o)
TEST_LIB_OBJ := $(TEST_LIB_SRC:%.c=$(BUILD)/obj/%.o)
TEST_BIN := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
BENCH_BIN := $(BENCH_SRC:bench/%.c=$(BUILD)/bench/%)
# Section 3 pages, generated from the doc comments of the header (the one source); the set of pages
# follows the header, so the rule's target is a stamp.
MAN3_STAMP := $(BUILD)/man/man3/.stamp

all: $(BUILD)/libuswap.so $(BUILD)/libuswap.a $(BUILD)/uswap $(BUILD)/uswap.pc $(BENCH_BIN) $(MAN3_STAMP) \
	$(if $(PRELOAD_SRC),$(BUILD)/libuswap-preload.so)

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -MMD -MP -c $< -o $@

$(BUILD)/libuswap.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/libuswap.so: $(LIB_OBJ) src/uswap.map
	$(CC) -shared -Wl,--version-script=src/uswap.map -Wl,-soname,libuswap.so.0 $(LDSAN) \
		-o $@ $(LIB_OBJ) $(LIBS)

# The command links the static library so that `build/uswap` runs from the tree without LD_LIBRARY_PATH.
$(BUILD)/uswap: $(CLI_OBJ) $(BUILD)/libuswap.a
	$(CC) $(LDSAN) -o $@ $(CLI_OBJ) $(BUILD)/libuswap.a $(LIBS)

$(BUILD)/libuswap-preload.so: $(PRELOAD_OBJ) $(BUILD)/libuswap.a src/preload/preload.map
	$(CC) -shared $(LDSAN) -Wl,--version-script=src/preload/preload.map -o $@ $(PRELOAD_OBJ) \
		$(BUILD)/libuswap.a $(LIBS) -lmimalloc

$(BUILD)/tests/%: $(BUILD)/obj/tests/%.o $(TEST_LIB_OBJ) $(BUILD)/libuswap.a
	@mkdir -p $(dir $@)
	$(CC) $(LDSAN) -o $@ $< $(TEST_LIB_OBJ) $(BUILD)/libuswap.a $(LIBS)

# Benchmark workloads (bench/*.c): plain programs, linked statically with the library for its page generator.
$(BUILD)/bench/%: $(BUILD)/obj/bench/%.o $(BUILD)/libuswap.a
	@mkdir -p $(dir $@)
	$(CC) $(LDSAN) -o $@ $< $(BUILD)/libuswap.a $(LIBS)

$(BUILD)/uswap.pc: Makefile
	@mkdir -p $(dir $@)
	printf 'prefix=%s\nlibdir=$${prefix}/lib\nincludedir=$${prefix}/include\n\nName: uswap\nDescription: user-space swap abstraction layer\nVersion: %s\nRequires.private: %s\nLibs: -L$${libdir} -luswap\nLibs.private: -pthread -lm -ldl\nCflags: -I$${includedir}\n' \
		'$(PREFIX)' '$(VERSION)' '$(PKGS)' > $@

$(MAN3_STAMP): include/uswap.h scripts/mkman
	rm -rf $(dir $@)
	scripts/mkman --version $(VERSION) include/uswap.h $(dir $@)
	touch $@

# The soak (tests/soak.c): a program of its own, linked like a test; test_soak runs a short one.
$(BUILD)/tests/soak: $(BUILD)/obj/tests/soak.o $(TEST_LIB_OBJ) $(BUILD)/libuswap.a
	@mkdir -p $(dir $@)
	$(CC) $(LDSAN) -o $@ $< $(TEST_LIB_OBJ) $(BUILD)/libuswap.a $(LIBS)

tests: $(TEST_BIN) $(BUILD)/tests/soak

check: all tests
	BUILD=$(BUILD) tools/runtests.sh $(TEST_BIN)

install: all
	install -d $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/bin \
		$(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/share/man/man1 $(DESTDIR)$(PREFIX)/share/man/man3
	install -m 644 $(BUILD)/libuswap.a $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(BUILD)/libuswap.so $(DESTDIR)$(PREFIX)/lib/libuswap.so.0
	ln -sf libuswap.so.0 $(DESTDIR)$(PREFIX)/lib/libuswap.so
	install -m 644 include/uswap.h $(DESTDIR)$(PREFIX)/include/
	install -m 755 $(BUILD)/uswap $(DESTDIR)$(PREFIX)/bin/
	sed 's|^prefix=.*|prefix=$(PREFIX)|' $(BUILD)/uswap.pc > $(DESTDIR)$(PREFIX)/lib/pkgconfig/uswap.pc
	$(if $(wildcard $(BUILD)/libuswap-preload.so),install -m 755 $(BUILD)/libuswap-preload.so $(DESTDIR)$(PREFIX)/lib/)
	$(if $(wildcard docs/*.1),install -m 644 docs/*.1 $(DESTDIR)$(PREFIX)/share/man/man1/)
	install -m 644 $(BUILD)/man/man3/*.3 $(DESTDIR)$(PREFIX)/share/man/man3/

format:
	clang-format -i $(shell git ls-files '*.c' '*.h')

format-check:
	clang-format --dry-run -Werror $(shell git ls-files '*.c' '*.h')

clean:
	rm -rf build build-*

# `make soak SECONDS=N`: the soak in the plain, ASan + UBSan and TSan builds, one after the other;
# `make soak-one` in the build SAN= names. Each run ends with "N passed, N failed" (tools/runsoak.sh).
SECONDS ?= 600
soak:
	$(MAKE) SAN= soak-one
	$(MAKE) SAN=address,undefined soak-one
	$(MAKE) SAN=thread soak-one

soak-one: $(BUILD)/tests/soak
	tools/runsoak.sh $(BUILD)/tests/soak $(SECONDS)

.PHONY: all tests check install format format-check clean soak soak-one
.SECONDARY:
-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
