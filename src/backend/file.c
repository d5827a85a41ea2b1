/*
 * file.c - swap-file tier: an O_DIRECT file (unnamed O_TMPFILE by default) or block device, driven by
 * io_uring, cut into 2 MiB clusters.
 * One job: one tier behind the ops vector. Its allocator, I/O contexts, write-behind stage and
 * readahead windows share one cluster table and one lock order, which is why they are one file.
 *
 * A cluster holds either plain pages (4 KiB slots, handle = slot number) or packed objects: pages a
 * compressed tier wrote back still compressed (BACKEND_PACKED), each an 8-byte header and the compressed
 * bytes in a run of 1..8 512-byte sectors (handle = FH_PACKED | first sector << 3 | (sectors - 1)), so
 * handles sort in file order.
 * One bitmap per cluster (slots or sectors) is the allocator; free clusters sit on two lists (still
 * backed by file system blocks, or punched), partly used ones on one list per kind. Each I/O context
 * keeps its own current page cluster, so one thread's stores stay together and a folio gets one run.
 *
 * Fault path: a load takes an I/O context (its own ring, bounce buffer and zstd decompressor; a free one
 * by trylock, so two threads never wait on each other), queues one read per contiguous run and per
 * packed object, submits them together and waits. Loads take no tier-wide lock: core's descriptor lock
 * keeps a handle from being released or reused meanwhile.
 * Writeback path (store_obj): objects are appended to a staging buffer and written by flush() in one
 * request; until then loads of them are served from the buffer. A failed flush keeps the buffer (and
 * its objects readable) and refuses new objects until a later flush succeeds: nothing is dropped.
 * Store path: folios of up to ST_FOLIO_MAX pages (incompressible pages the pool refused, mostly) are
 * staged the same way (write-behind): ST_PAGES pages, written together when the stage fills or at
 * flush(), runs of adjacent slots as one request; loads, peeks and releases look there first (a range
 * check, no lock, on a miss). The stage is written under wb_lock and a release of a staged slot takes
 * wb_lock, so a freed slot is never reused while its old data is in flight. Larger folios are written
 * at once.
 * Swapoff path (peek): whole clusters are read in handle order, two 2 MiB windows, the next one in
 * flight while the current one is used; a window is valid only for the write generation it was read at.
 *
 * encrypt: plain pages are sealed (seal.c) into the bounce buffer before they are written, bound to
 * (owner, slot); the tag and nonce counter stay in memory (tags[], 24 bytes a page), so altered or
 * replayed file blocks fail to open. Compressed objects are refused (store_obj() returns 0): the mover
 * then stores the plain page, sealed.
 *
 * Invariant: a set map bit below a cluster's capacity is a live slot/sector, and nr_used counts them;
 * bits at and above the capacity (the file's last, short cluster) are always set. Lock order:
 * desc lock (core) -> wb_lock -> lock; ra_lock -> lock. Called only through backend.c.
 */

#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <linux/fs.h>
#include <liburing.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/backend.h"
#include "backend/file.h"
#include "backend/codec.h"
#include "backend/seal.h"
#include "util/alloc.h"
#include "util/err.h"
#include "util/fd.h"

#define SECTOR           512u
#define SECTORS_PER_PAGE (PAGE_SIZE / SECTOR)
#define FC_PAGES         512u /* 2 MiB clusters: one largest folio */
#define FC_SECTORS       (FC_PAGES * SECTORS_PER_PAGE)
#define FC_BYTES         ((uint64_t)FC_PAGES * PAGE_SIZE)
#define RA_STREAMS       2u /* movers reading side by side (backend_stream), each with two windows */
#define FC_WORDS         (FC_SECTORS / 64)
#define FH_PACKED        (1u << 31)
#define FH_SECT_MASK     ((1u << 28) - 1) /* packed objects live in the first 128 GiB */
#define FH_MAX_SLOTS     FH_PACKED        /* plain pages in the first 8 TiB */
#define OBJ_HDR          8u               /* owner (4), length (2), format (1), 0 (1) */
#define OBJ_MAX_SECTORS  8u
#define FILE_QD          64u        /* ring entries; bigger batches are submitted in parts */
#define WB_BYTES         (1u << 20) /* staging of written-back objects: one write each flush */
#define ST_PAGES         128u       /* staging of plain pages: written together when it fills */
#define ST_FOLIO_MAX     32u        /* folios up to this many pages are staged; bigger ones written at once */
#define PUNCH_KEEP       8u         /* free clusters kept backed by file system blocks for quick reuse */
#define PUNCH_BATCH      8u         /* punch when this many more are free: the space goes back in bulk */
#define PACKED_REUSE_PCT 75         /* a packed cluster at most this full may become the writeback cluster */
#define NIL              UINT32_MAX

enum fc_kind { FC_FREE, FC_PAGES_KIND, FC_PACKED_KIND, FC_PUNCHING };
enum fc_list { L_CLEAN, L_BACKED, L_PAGES, L_PACKED, NR_LISTS, L_NONE = NR_LISTS };

struct fcluster {
	uint64_t map[FC_WORDS]; /* PAGES: the first FC_PAGES bits; PACKED: all */
	uint32_t prev, next;
	uint16_t nr_used; /* slots or sectors */
	uint16_t cap;     /* pages of the file in this cluster (FC_PAGES but for the last one) */
	uint8_t kind, list, backed;
};

/* One caller at a time: taken by trylock, like the codec contexts. */
struct fctx {
	pthread_mutex_t lock;
	struct io_uring ring;
	unsigned char *bounce; /* FC_PAGES pages; page i of a load is staged at page i */
	struct codec_dctx dctx;
	uint32_t cur; /* current page cluster of this context; NIL none */
};

struct fio {
	void *buf;
	uint64_t off;
	uint32_t len;
	bool write;
};

struct ra_win {
	uint32_t cluster; /* NIL: empty */
	uint32_t gen;     /* f->gen when the read was queued */
	int res;          /* bytes read, or -errno; valid when !inflight */
	bool inflight;
	unsigned char *buf;
};

struct file_tier {
	int fd;
	bool blkdev;
	uint32_t nr_clusters;
	uint64_t nr_slots;
	struct fcluster *cl;

	pthread_mutex_t lock; /* cl[], lists, counters below */
	uint32_t head[NR_LISTS], count[NR_LISTS];
	uint64_t used_pages, used_sectors;
	uint32_t clusters_in_use;
	uint32_t fresh; /* clusters from here on were never used (their entries still zero) */
	uint64_t split_stores, punched_clusters, punch_calls;
	uint32_t pk_cur, pk_cursor; /* writeback cluster and next sector in it */
	_Atomic uint32_t gen;       /* bumped after every write: readahead windows check it */

	unsigned nr_ctx;
	struct fctx *ctx;

	pthread_mutex_t wb_lock; /* staging and its ring */
	struct io_uring wb_ring;
	unsigned char *wb_buf;
	uint32_t wb_base, wb_len;      /* sectors staged: [wb_base, wb_base + wb_len) */
	_Atomic uint32_t wb_lo, wb_hi; /* published copy of the staged range, for lock-free misses */
	bool wb_failed;
	/* staging of plain pages, under wb_lock too: page i of st_buf is for slot st_slot[i] (NIL: freed) */
	unsigned char *st_buf;
	uint32_t st_slot[ST_PAGES];
	uint32_t st_len;               /* pages staged, freed ones included */
	_Atomic uint32_t st_lo, st_hi; /* every staged slot is in [st_lo, st_hi): misses take no lock */
	bool st_failed;
	uint64_t st_pages, st_writes; /* pages staged, requests that wrote them (file_layout) */

	pthread_mutex_t ra_lock; /* readahead windows and their ring */
	struct io_uring ra_ring;
	struct ra_win win[2 * RA_STREAMS]; /* a pair per mover: the cluster read, the next one */

	struct sealer *seal; /* encrypt; NULL otherwise */
	struct seal_tag
		*tags; /* encrypt: per plain slot, written by its store before the descriptor publishes */
};

/* ---- bitmaps ---- */

static void bits_set(uint64_t *map, unsigned start, unsigned n, bool val)
{
	for (unsigned b = start; b < start + n;) {
		unsigned w = b / 64, lo = b % 64, k = 64 - lo < start + n - b ? 64 - lo : start + n - b;
		uint64_t m = (k == 64 ? ~0ull : ((1ull << k) - 1)) << lo;

		if (val)
			map[w] |= m;
		else
			map[w] &= ~m;
		b += k;
	}
}

/* First bit at or after @from below @nbits equal to @val, or @nbits. */
static unsigned bit_next(const uint64_t *map, unsigned from, unsigned nbits, bool val)
{
	while (from < nbits) {
		uint64_t w = val ? map[from / 64] : ~map[from / 64];

		w &= ~0ull << (from % 64);
		if (w) {
			unsigned b = (from & ~63u) + (unsigned)__builtin_ctzll(w);

			return b < nbits ? b : nbits;
		}
		from = (from & ~63u) + 64;
	}
	return nbits;
}

/* First run of @n clear bits at or after @from below @nbits: its start, or NIL. *longest: longest seen. */
static uint32_t run_find(const uint64_t *map, unsigned from, unsigned nbits, unsigned n, unsigned *longest)
{
	while (from < nbits) {
		unsigned z = bit_next(map, from, nbits, false), o;

		if (z >= nbits)
			break;
		o = bit_next(map, z, nbits, true);
		if (o - z >= n)
			return z;
		if (longest && o - z > *longest)
			*longest = o - z;
		from = o;
	}
	return NIL;
}

/* ---- cluster lists, under f->lock ---- */

static void list_del(struct file_tier *f, uint32_t ci)
{
	struct fcluster *c = &f->cl[ci];

	if (c->list == L_NONE)
		return;
	if (c->prev != NIL)
		f->cl[c->prev].next = c->next;
	else
		f->head[c->list] = c->next;
	if (c->next != NIL)
		f->cl[c->next].prev = c->prev;
	f->count[c->list]--;
	c->list = L_NONE;
}

static void list_add(struct file_tier *f, uint32_t ci, enum fc_list l)
{
	struct fcluster *c = &f->cl[ci];

	list_del(f, ci);
	c->prev = NIL;
	c->next = f->head[l];
	if (c->next != NIL)
		f->cl[c->next].prev = ci;
	f->head[l] = ci;
	f->count[l]++;
	c->list = (uint8_t)l;
}

static unsigned cl_bits(const struct fcluster *c)
{
	return c->kind == FC_PACKED_KIND ? FC_SECTORS : FC_PAGES;
}

static unsigned cl_cap_bits(const struct fcluster *c)
{
	return c->kind == FC_PACKED_KIND ? c->cap * SECTORS_PER_PAGE : c->cap;
}

/* The list a cluster in use belongs on after its count changed. */
static void cl_relist(struct file_tier *f, uint32_t ci)
{
	struct fcluster *c = &f->cl[ci];

	if (c->nr_used == 0) {
		c->kind = FC_FREE;
		f->clusters_in_use--;
		list_add(f, ci, c->backed ? L_BACKED : L_CLEAN);
	} else if (c->nr_used == cl_cap_bits(c)) {
		list_del(f, ci);
	} else if (c->list == L_NONE) {
		list_add(f, ci, c->kind == FC_PACKED_KIND ? L_PACKED : L_PAGES);
	}
}

static int punch(struct file_tier *f, uint64_t off, uint64_t len)
{
	if (f->blkdev) {
		uint64_t r[2] = {off, len};

		return ioctl(f->fd, BLKDISCARD, r) ? -errno : 0;
	}
	return fallocate(f->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off, (off_t)len) ? -errno
												    : 0;
}

/* A free cluster made ready for @kind (backed by blocks first); NIL when none, -errno in *err. */
static uint32_t cl_take_free(struct file_tier *f, enum fc_kind kind, int *err)
{
	uint32_t ci = f->head[L_BACKED] != NIL ? f->head[L_BACKED] : f->head[L_CLEAN];
	struct fcluster *c;

	if (ci == NIL && f->fresh < f->nr_clusters) {
		uint64_t left = f->nr_slots - (uint64_t)f->fresh * FC_PAGES;

		ci = f->fresh++;
		c = &f->cl[ci];
		c->cap = (uint16_t)(left < FC_PAGES ? left : FC_PAGES);
		c->list = L_NONE;
		list_add(f, ci, L_CLEAN); /* where it waits if its blocks cannot be reserved now */
	}
	if (ci == NIL)
		return NIL;
	c = &f->cl[ci];
	if (!c->backed && !f->blkdev) {
		/* Reserve the blocks now: contiguous on disk, and a full file system says so here. */
		if (fallocate(f->fd, 0, (off_t)(ci * FC_BYTES), (off_t)c->cap * PAGE_SIZE)) {
			*err = errno == ENOSPC ? -ENOSPC : -EIO;
			return NIL;
		}
		c->backed = 1;
	}
	list_del(f, ci);
	c->kind = (uint8_t)kind;
	c->nr_used = 0;
	memset(c->map, 0, sizeof(c->map));
	bits_set(c->map, cl_cap_bits(c), cl_bits(c) - cl_cap_bits(c), true);
	f->clusters_in_use++;
	return ci;
}

/* ---- page allocation ---- */

/*
 * A run of up to @n free slots, under f->lock: the context's current cluster, else the first partly
 * used cluster with a fitting run (small folios fill holes), else a free cluster, else the longest run
 * anywhere (the folio is split: *got < n). Return: first slot, or NIL with *err set.
 */
static uint32_t alloc_pages(struct file_tier *f, struct fctx *x, unsigned n, unsigned *got, int *err)
{
	unsigned longest = 0;
	uint32_t ci, best = NIL, s;

	*err = -ENOSPC;
	ci = x->cur;
	if (ci != NIL && f->cl[ci].kind == FC_PAGES_KIND) {
		s = run_find(f->cl[ci].map, 0, FC_PAGES, n, NULL);
		if (s != NIL)
			goto found;
	}
	for (ci = f->head[L_PAGES]; ci != NIL && n < FC_PAGES / 8; ci = f->cl[ci].next) {
		if (FC_PAGES - f->cl[ci].nr_used < n)
			continue;
		s = run_find(f->cl[ci].map, 0, FC_PAGES, n, NULL);
		if (s != NIL)
			goto found;
	}
	ci = cl_take_free(f, FC_PAGES_KIND, err);
	if (ci != NIL) {
		s = run_find(f->cl[ci].map, 0, FC_PAGES, n, NULL);
		if (s != NIL)
			goto found;
		n = f->cl[ci].cap; /* the short last cluster */
		s = 0;
		goto found_part;
	}
	for (ci = f->head[L_PAGES]; ci != NIL; ci = f->cl[ci].next) {
		unsigned before = longest;

		s = run_find(f->cl[ci].map, 0, FC_PAGES, n, &longest);
		if (s != NIL)
			goto found;
		if (longest > before)
			best = ci;
	}
	if (best == NIL)
		return NIL;
	ci = best;
	n = longest;
	s = run_find(f->cl[ci].map, 0, FC_PAGES, n, NULL);
found_part:
	f->split_stores++;
found:
	bits_set(f->cl[ci].map, s, n, true);
	f->cl[ci].nr_used += (uint16_t)n;
	f->used_pages += n;
	cl_relist(f, ci);
	x->cur = ci;
	*got = n;
	return ci * FC_PAGES + s;
}

static void free_pages(struct file_tier *f, uint32_t slot, unsigned n)
{
	uint32_t ci = slot / FC_PAGES;
	struct fcluster *c = &f->cl[ci];

	bits_set(c->map, slot % FC_PAGES, n, false);
	c->nr_used -= (uint16_t)n;
	f->used_pages -= n;
	cl_relist(f, ci);
}

/* ---- packed allocation: under f->lock, for the one writer of the staging buffer ---- */

static uint32_t alloc_sectors(struct file_tier *f, unsigned n, int *err)
{
	uint32_t ci = f->pk_cur, s = NIL;

	if (ci != NIL && f->cl[ci].kind == FC_PACKED_KIND)
		s = run_find(f->cl[ci].map, f->pk_cursor, FC_SECTORS, n, NULL);
	if (s == NIL) {
		*err = -ENOSPC;
		for (ci = f->head[L_PACKED]; ci != NIL; ci = f->cl[ci].next) {
			struct fcluster *c = &f->cl[ci];

			if (ci != f->pk_cur && c->nr_used * 100u <= cl_cap_bits(c) * PACKED_REUSE_PCT &&
			    (s = run_find(c->map, 0, FC_SECTORS, n, NULL)) != NIL)
				break;
		}
		if (ci == NIL) {
			ci = cl_take_free(f, FC_PACKED_KIND, err);
			if (ci == NIL)
				return NIL;
			if ((uint64_t)(ci + 1) * FC_SECTORS > FH_SECT_MASK + 1ull) {
				/* beyond what a packed handle can name: give it back */
				f->cl[ci].kind = FC_FREE;
				f->clusters_in_use--;
				list_add(f, ci, L_BACKED);
				return NIL;
			}
			s = 0;
		}
		f->pk_cur = ci;
	}
	bits_set(f->cl[ci].map, s, n, true);
	f->cl[ci].nr_used += (uint16_t)n;
	f->used_sectors += n;
	cl_relist(f, ci);
	f->pk_cursor = s + n;
	return ci * FC_SECTORS + s;
}

static void free_sectors(struct file_tier *f, uint32_t sect, unsigned n)
{
	uint32_t ci = sect / FC_SECTORS;
	struct fcluster *c = &f->cl[ci];

	bits_set(c->map, sect % FC_SECTORS, n, false);
	c->nr_used -= (uint16_t)n;
	f->used_sectors -= n;
	cl_relist(f, ci);
}

static inline bool h_packed(uint64_t h)
{
	return h & FH_PACKED;
}

static inline uint32_t h_sector(uint64_t h)
{
	return (uint32_t)(h >> 3) & FH_SECT_MASK;
}

static inline unsigned h_nsect(uint64_t h)
{
	return (unsigned)(h & 7) + 1;
}

/* ---- io_uring ---- */

/*
 * Run the requests @io[0..n) on @ring, submitted together (in parts of the ring's size).
 * Return: 0; -ENOSPC, or -EIO for any other failure or a short transfer.
 */
static int ring_run(struct io_uring *ring, const struct fio *io, size_t n)
{
	size_t queued = 0, done = 0;
	int ret = 0;

	while (done < n) {
		struct io_uring_cqe *cqe;
		int r;

		while (queued < n) {
			struct io_uring_sqe *sqe = io_uring_get_sqe(ring);

			if (!sqe)
				break;
			if (io[queued].write)
				io_uring_prep_write(sqe, 0, io[queued].buf, io[queued].len, io[queued].off);
			else
				io_uring_prep_read(sqe, 0, io[queued].buf, io[queued].len, io[queued].off);
			sqe->flags |= IOSQE_FIXED_FILE;
			io_uring_sqe_set_data64(sqe, queued);
			queued++;
		}
		r = io_uring_submit_and_wait(ring, 1);
		if (r < 0 && r != -EINTR && r != -EAGAIN && r != -EBUSY) {
			/* Requests already in flight still target our buffers: wait them out. */
			if (!ret)
				ret = -EIO;
			if (io_uring_wait_cqe(ring, &cqe))
				return ret; /* the ring is unusable; nothing more can be done */
		}
		while (done < queued && !io_uring_peek_cqe(ring, &cqe)) {
			uint64_t i = io_uring_cqe_get_data64(cqe);

			if (cqe->res != (int)io[i].len && !ret)
				ret = cqe->res == -ENOSPC ? -ENOSPC : -EIO;
			io_uring_cqe_seen(ring, cqe);
			done++;
		}
	}
	return ret;
}

static void ring_exit(struct io_uring *ring)
{
	fd_forget(ring->ring_fd);
	io_uring_queue_exit(ring);
}

static int ring_setup(struct io_uring *ring, unsigned entries, int fd)
{
	int ret = io_uring_queue_init(entries, ring, IORING_SETUP_COOP_TASKRUN);

	if (ret == -EINVAL)
		ret = io_uring_queue_init(entries, ring, 0);
	if (ret)
		return ret;
	ring->ring_fd = ring->enter_ring_fd = fd_keep(ring->ring_fd);
	ret = io_uring_register_files(ring, &fd, 1);
	if (ret)
		ring_exit(ring);
	return ret;
}

static struct fctx *ctx_get(struct file_tier *f)
{
	static _Atomic unsigned next_slot;
	static _Thread_local unsigned slot_plus1;
	unsigned mine;

	if (!slot_plus1)
		slot_plus1 = atomic_fetch_add(&next_slot, 1) + 1;
	mine = (slot_plus1 - 1) % f->nr_ctx;
	for (unsigned i = 0; i < f->nr_ctx; i++) {
		struct fctx *x = &f->ctx[(mine + i) % f->nr_ctx];

		if (!pthread_mutex_trylock(&x->lock))
			return x;
	}
	pthread_mutex_lock(&f->ctx[mine].lock);
	return &f->ctx[mine];
}

static void ctx_put(struct fctx *x)
{
	pthread_mutex_unlock(&x->lock);
}

static inline bool dio_aligned(const void *p)
{
	return !((uintptr_t)p % SECTOR);
}

/* ---- open / close ---- */

static void file_free(struct file_tier *f)
{
	for (unsigned i = 0; f->ctx && i < f->nr_ctx; i++) {
		struct fctx *x = &f->ctx[i];

		if (x->bounce) {
			ring_exit(&x->ring);
			uunreserve(x->bounce, FC_BYTES);
			codec_dctx_destroy(&x->dctx);
			pthread_mutex_destroy(&x->lock);
		}
	}
	ufree(f->ctx);
	if (f->wb_buf) {
		ring_exit(&f->wb_ring);
		uunreserve(f->wb_buf, WB_BYTES);
	}
	uunreserve(f->st_buf, (size_t)ST_PAGES * PAGE_SIZE);
	if (f->win[0].buf) {
		ring_exit(&f->ra_ring);
		uunreserve(f->win[0].buf, 2 * RA_STREAMS * FC_BYTES);
	}
	uunreserve(f->cl, (size_t)f->nr_clusters * sizeof(struct fcluster));
	if (f->seal) {
		seal_destroy(f->seal);
		ufree(f->seal);
	}
	uunreserve(f->tags, f->nr_slots * sizeof(*f->tags));
	fd_close(f->fd);
	ufree(f);
}

/*
 * What open() would meet, without creating anything: a block device opened for reading and writing,
 * a named file that does not exist yet, and a directory that takes O_DIRECT files (a tmpfile is
 * opened there and closed: it leaves nothing).
 */
static int file_check(const char *path)
{
	char dir[256];
	const char *slash;
	struct stat st;
	int fd, ret;

	if (path[0] && !stat(path, &st)) {
		if (!S_ISBLK(st.st_mode))
			return err_set(-EEXIST, "file: '%s' exists (name a new file, or a block device)",
				       path);
		fd = open(path, O_RDWR | O_DIRECT | O_CLOEXEC);
		if (fd < 0) {
			ret = -errno;
			return err_set(ret, "file: cannot open '%s' with O_DIRECT: %s", path, strerror(-ret));
		}
		close(fd);
		return 0;
	}
	if (path[0]) {
		slash = strrchr(path, '/');
		snprintf(dir, sizeof(dir), "%.*s", slash == path ? 1 : (int)(slash - path), path);
	} else {
		const char *t = getenv("TMPDIR");

		snprintf(dir, sizeof(dir), "%s", t && t[0] ? t : "/var/tmp");
	}
	fd = open(dir, O_RDWR | O_TMPFILE | O_DIRECT | O_CLOEXEC, 0600);
	if (fd < 0) {
		ret = -errno;
		return err_set(ret, "file: cannot open '%s' with O_DIRECT: %s", path[0] ? path : "a tmpfile",
			       strerror(-ret));
	}
	close(fd);
	return 0;
}

static int file_open(struct backend *b, const char *args, const struct backend_env *env)
{
	char key[256], val[64], path[256] = "";
	uint64_t size = 4ULL << 30, dev_size = 0;
	bool size_set = false, encrypt = false;
	struct file_tier *f;
	struct stat st;
	const char *dir;
	int ret;

	while (backend_next_arg(&args, key, sizeof(key), val, sizeof(val))) {
		if (!strcmp(key, "size") && val[0]) {
			if (uswap_parse_size(val, 0, &size) || size < PAGE_SIZE)
				return err_set(-EINVAL, "file: bad size '%s'", val);
			size_set = true;
		} else if (key[0] == '/' && !val[0] && strlen(key) < sizeof(key) - 1) {
			snprintf(path, sizeof(path), "%s", key);
		} else if (!strcmp(key, "encrypt") && !val[0]) {
			encrypt = true;
		} else {
			return err_set(-EINVAL, "file: unknown option '%s' (/PATH, size=SIZE, encrypt)", key);
		}
	}
	if (env->check_only)
		return file_check(path);
	f = ualloc_zero(sizeof(*f));
	if (!f)
		return -ENOMEM;
	f->fd = -1;
	if (path[0] && !stat(path, &st) && S_ISBLK(st.st_mode)) {
		f->blkdev = true;
		f->fd = open(path, O_RDWR | O_DIRECT | O_CLOEXEC);
		if (f->fd >= 0 && ioctl(f->fd, BLKGETSIZE64, &dev_size))
			dev_size = 0;
		if (f->fd >= 0 && (!size_set || size > dev_size))
			size = dev_size;
	} else if (path[0]) {
		/*
		 * The name goes at once: the tier keeps the descriptor, so the file and its pages are gone
		 * when the process ends, however it ends (SIGKILL, a crash), as an O_TMPFILE's are.
		 */
		f->fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_DIRECT | O_CLOEXEC, 0600);
		if (f->fd >= 0)
			unlink(path);
	} else {
		dir = getenv("TMPDIR");
		if (!dir || !dir[0])
			dir = "/var/tmp";
		f->fd = open(dir, O_RDWR | O_TMPFILE | O_DIRECT | O_CLOEXEC, 0600);
	}
	if (f->fd < 0) {
		ret = -errno;
		file_free(f);
		return err_set(ret, "file: cannot open '%s' with O_DIRECT: %s", path[0] ? path : "a tmpfile",
			       strerror(-ret));
	}
	f->fd = fd_keep(f->fd);
	f->nr_slots = size / PAGE_SIZE;
	if (f->nr_slots > FH_MAX_SLOTS)
		f->nr_slots = FH_MAX_SLOTS;
	if (!f->nr_slots) {
		file_free(f);
		return err_set(-EINVAL, "file: '%s' holds no page", path);
	}
	if (!f->blkdev && ftruncate(f->fd, (off_t)(f->nr_slots * PAGE_SIZE))) {
		ret = -errno;
		file_free(f);
		return err_set(ret, "file: cannot size '%s': %s", path[0] ? path : "a tmpfile",
			       strerror(-ret));
	}
	f->nr_clusters = (uint32_t)((f->nr_slots + FC_PAGES - 1) / FC_PAGES);
	ret = -ENOMEM;
	f->cl = ureserve((size_t)f->nr_clusters * sizeof(struct fcluster));
	f->nr_ctx = env->nr_ctx ? env->nr_ctx : 1;
	f->ctx = ualloc_zero(f->nr_ctx * sizeof(*f->ctx));
	if (!f->cl || !f->ctx)
		goto out_free;
	for (unsigned i = 0; i < f->nr_ctx; i++) {
		struct fctx *x = &f->ctx[i];

		x->cur = NIL;
		ret = codec_dctx_init(&x->dctx);
		if (ret)
			goto out_free;
		x->bounce = ureserve(FC_BYTES);
		ret = x->bounce ? ring_setup(&x->ring, FILE_QD, f->fd) : -ENOMEM;
		if (ret) {
			uunreserve(x->bounce, FC_BYTES);
			x->bounce = NULL;
			codec_dctx_destroy(&x->dctx);
			goto out_free;
		}
		pthread_mutex_init(&x->lock, NULL);
	}
	f->st_buf = ureserve((size_t)ST_PAGES * PAGE_SIZE);
	ret = -ENOMEM;
	if (!f->st_buf)
		goto out_free;
	f->wb_buf = ureserve(WB_BYTES);
	ret = f->wb_buf ? ring_setup(&f->wb_ring, FILE_QD, f->fd) : -ENOMEM;
	if (ret) {
		uunreserve(f->wb_buf, WB_BYTES);
		f->wb_buf = NULL;
		goto out_free;
	}
	f->win[0].buf = ureserve(2 * RA_STREAMS * FC_BYTES);
	ret = f->win[0].buf ? ring_setup(&f->ra_ring, 2 * RA_STREAMS, f->fd) : -ENOMEM;
	if (ret) {
		uunreserve(f->win[0].buf, 2 * RA_STREAMS * FC_BYTES);
		f->win[0].buf = NULL;
		goto out_free;
	}
	for (unsigned i = 0; i < 2 * RA_STREAMS; i++) {
		f->win[i].buf = f->win[0].buf + i * FC_BYTES; /* pages are touched only when read into */
		f->win[i].cluster = NIL;
	}
	for (unsigned l = 0; l < NR_LISTS; l++)
		f->head[l] = NIL;
	f->fresh = 0; /* clusters are set up as they first come into use: a big file costs nothing first */
	f->pk_cur = NIL;
	if (encrypt) {
		f->seal = ualloc_zero(sizeof(*f->seal));
		f->tags = ureserve(f->nr_slots * sizeof(*f->tags));
		if (!f->seal || !f->tags || seal_init(f->seal)) {
			ret = -ENOMEM;
			goto out_free;
		}
	}
	pthread_mutex_init(&f->lock, NULL);
	pthread_mutex_init(&f->wb_lock, NULL);
	pthread_mutex_init(&f->ra_lock, NULL);
	b->priv = f;
	return 0;

out_free:
	file_free(f);
	return ret == -ENOMEM ? ret : err_set(ret, "file: io_uring setup failed: %s", strerror(-ret));
}

static void file_close(struct backend *b)
{
	struct file_tier *f = b->priv;

	if (!f)
		return;
	/* No data outlives the layer: drop every block (a named file lost its name at open). */
	if (f->blkdev)
		punch(f, 0, f->nr_slots * PAGE_SIZE);
	else if (ftruncate(f->fd, 0))
		punch(f, 0, f->nr_slots * PAGE_SIZE);
	pthread_mutex_destroy(&f->lock);
	pthread_mutex_destroy(&f->wb_lock);
	pthread_mutex_destroy(&f->ra_lock);
	file_free(f);
	b->priv = NULL;
}

/* ---- staging of plain pages ---- */

/* Whether slot @slot may be staged: false means surely not (no lock taken). */
static inline bool st_maybe(struct file_tier *f, uint64_t slot)
{
	return slot >= atomic_load_explicit(&f->st_lo, memory_order_acquire) &&
	       slot < atomic_load_explicit(&f->st_hi, memory_order_acquire);
}

/*
 * Write the staged pages, a run of adjacent slots in one request, all submitted together; wb_lock held
 * (so a slot freed meanwhile cannot be reused while its old data is in flight). On failure they stay
 * staged and readable, and new pages are refused until a write succeeds: nothing is dropped.
 */
static int st_write(struct file_tier *f)
{
	struct fio io[ST_PAGES];
	size_t nio = 0;
	int ret = 0;

	for (uint32_t i = 0; i < f->st_len;) {
		uint32_t n = 1;

		if (f->st_slot[i] == NIL) {
			i++;
			continue;
		}
		while (i + n < f->st_len && f->st_slot[i + n] == f->st_slot[i] + n)
			n++;
		io[nio++] = (struct fio){f->st_buf + (size_t)i * PAGE_SIZE,
					 (uint64_t)f->st_slot[i] * PAGE_SIZE, n * PAGE_SIZE, true};
		i += n;
	}
	if (nio) {
		ret = ring_run(&f->wb_ring, io, nio);
		atomic_fetch_add_explicit(&f->gen, 1, memory_order_release);
		if (ret) {
			f->st_failed = true;
			return ret;
		}
		f->st_writes += nio;
	}
	f->st_failed = false;
	f->st_len = 0;
	atomic_store_explicit(&f->st_hi, 0, memory_order_release);
	atomic_store_explicit(&f->st_lo, 0, memory_order_release);
	return 0;
}

/*
 * Stage @n pages at @src for slots [@s, @s + n) (sealed first with encrypt); a full stage is written
 * first. Return: 0, or -errno (the stage could not be written: nothing staged).
 */
static int st_add(struct file_tier *f, const void *src, unsigned n, uint32_t s, uint32_t owner)
{
	int err = 0;

	pthread_mutex_lock(&f->wb_lock);
	if (f->st_failed || f->st_len + n > ST_PAGES)
		err = st_write(f);
	if (!err) {
		for (unsigned i = 0; i < n; i++) {
			unsigned char *dst = f->st_buf + (size_t)(f->st_len + i) * PAGE_SIZE;
			const char *page = (const char *)src + (size_t)i * PAGE_SIZE;

			if (f->seal)
				seal_page_detached(f->seal, owner + i, s + i, page, PAGE_SIZE, dst,
						   &f->tags[s + i]);
			else
				memcpy(dst, page, PAGE_SIZE);
			f->st_slot[f->st_len + i] = s + i;
		}
		if (!f->st_len || s < atomic_load_explicit(&f->st_lo, memory_order_relaxed))
			atomic_store_explicit(&f->st_lo, s, memory_order_release);
		if (s + n > atomic_load_explicit(&f->st_hi, memory_order_relaxed))
			atomic_store_explicit(&f->st_hi, s + n, memory_order_release);
		f->st_len += n;
		f->st_pages += n;
	}
	pthread_mutex_unlock(&f->wb_lock);
	return err;
}

/* Where slot @slot is in the stage, or NIL; wb_lock held. A slot is staged at most once (freed: NIL). */
static uint32_t st_find(const struct file_tier *f, uint64_t slot)
{
	for (uint32_t i = 0; i < f->st_len; i++)
		if (f->st_slot[i] == slot)
			return i;
	return NIL;
}

/* Copy staged slot @slot (as it would be on disk: sealed with encrypt) to @dst; false if not staged. */
static bool st_copy(struct file_tier *f, uint64_t slot, void *dst)
{
	uint32_t i;

	if (!st_maybe(f, slot))
		return false;
	pthread_mutex_lock(&f->wb_lock);
	i = st_find(f, slot);
	if (i != NIL)
		memcpy(dst, f->st_buf + (size_t)i * PAGE_SIZE, PAGE_SIZE);
	pthread_mutex_unlock(&f->wb_lock);
	return i != NIL;
}

/* ---- store / load / release ---- */

static ssize_t file_store(struct backend *b, const void *src, size_t npages, uint32_t owner,
			  uint64_t *handles)
{
	struct file_tier *f = b->priv;
	struct fctx *x = ctx_get(f);
	unsigned got = 0;
	uint32_t s;
	int err;
	struct fio io;

	if (npages > FC_PAGES)
		npages = FC_PAGES;
	pthread_mutex_lock(&f->lock);
	s = alloc_pages(f, x, (unsigned)npages, &got, &err);
	pthread_mutex_unlock(&f->lock);
	if (s == NIL) {
		ctx_put(x);
		return err;
	}
	if (got <= ST_FOLIO_MAX) {
		ctx_put(x);
		err = st_add(f, src, got, s, owner);
		goto out;
	}
	io.buf = (void *)src;
	if (f->seal) {
		for (unsigned i = 0; i < got; i++)
			seal_page_detached(f->seal, owner + i, s + i,
					   (const char *)src + (size_t)i * PAGE_SIZE, PAGE_SIZE,
					   x->bounce + (size_t)i * PAGE_SIZE, &f->tags[s + i]);
		io.buf = x->bounce;
	} else if (!dio_aligned(src)) {
		memcpy(x->bounce, src, (size_t)got * PAGE_SIZE);
		io.buf = x->bounce;
	}
	io.off = (uint64_t)s * PAGE_SIZE;
	io.len = got * PAGE_SIZE;
	io.write = true;
	err = ring_run(&x->ring, &io, 1);
	ctx_put(x);
	atomic_fetch_add_explicit(&f->gen, 1, memory_order_release);
out:
	if (err) {
		pthread_mutex_lock(&f->lock);
		free_pages(f, s, got);
		pthread_mutex_unlock(&f->lock);
		return err;
	}
	for (unsigned i = 0; i < got; i++)
		handles[i] = s + i;
	return got;
}

/* Check and unpack the object at @obj (as read from sector @sect) into the page @dst. */
static int obj_unpack(struct codec_dctx *d, const unsigned char *obj, uint32_t owner, unsigned nsect,
		      void *dst)
{
	uint32_t o;
	uint16_t len;
	uint8_t fmt = obj[6];

	memcpy(&o, obj, 4);
	memcpy(&len, obj + 4, 2);
	if (o != owner || OBJ_HDR + len > nsect * SECTOR || (fmt != OBJ_LZ4 && fmt != OBJ_ZSTD))
		return -EIO;
	return codec_decompress_as(fmt == OBJ_LZ4 ? CODEC_LZ4 : CODEC_ZSTD, d, obj + OBJ_HDR, len, dst);
}

/* Copy the staged object at sector @sect into @obj; false when it is not (or no longer) staged. */
static bool wb_copy(struct file_tier *f, uint32_t sect, unsigned nsect, void *obj)
{
	bool hit = false;

	if (sect < atomic_load_explicit(&f->wb_lo, memory_order_acquire) ||
	    sect >= atomic_load_explicit(&f->wb_hi, memory_order_acquire))
		return false;
	pthread_mutex_lock(&f->wb_lock);
	if (f->wb_len && sect >= f->wb_base && sect + nsect <= f->wb_base + f->wb_len) {
		memcpy(obj, f->wb_buf + (size_t)(sect - f->wb_base) * SECTOR, (size_t)nsect * SECTOR);
		hit = true;
	}
	pthread_mutex_unlock(&f->wb_lock);
	return hit;
}

/* Page i is owned by @owners[i], or by @owner + i without @owners. */
static int load_pages(struct backend *b, uint32_t owner, const uint32_t *owners, const uint64_t *handles,
		      size_t npages, void *dst)
{
	struct file_tier *f = b->priv;
	unsigned char *out = dst;
	struct fio io[64];
	size_t nio = 0, i;
	struct fctx *x;
	int ret = 0;

	if (npages > FC_PAGES)
		return -EIO;
	x = ctx_get(f);
	for (i = 0; i < npages && !ret;) {
		size_t n = 1;

		if (h_packed(handles[i])) {
			unsigned ns = h_nsect(handles[i]);

			if (!wb_copy(f, h_sector(handles[i]), ns, x->bounce + i * PAGE_SIZE))
				io[nio++] = (struct fio){x->bounce + i * PAGE_SIZE,
							 (uint64_t)h_sector(handles[i]) * SECTOR, ns * SECTOR,
							 false};
		} else {
			void *buf = !f->seal && dio_aligned(out + i * PAGE_SIZE) ? out + i * PAGE_SIZE
										 : x->bounce + i * PAGE_SIZE;

			if (!st_copy(f, handles[i], buf)) {
				while (i + n < npages && handles[i + n] == handles[i] + n &&
				       !h_packed(handles[i + n]) && !st_maybe(f, handles[i + n]))
					n++;
				io[nio++] = (struct fio){buf, handles[i] * PAGE_SIZE,
							 (uint32_t)(n * PAGE_SIZE), false};
			}
		}
		i += n;
		if (nio == sizeof(io) / sizeof(io[0]) || (i == npages && nio)) {
			ret = ring_run(&x->ring, io, nio) ? -EIO : 0;
			nio = 0;
		}
	}
	for (i = 0; i < npages && !ret; i++) {
		if (h_packed(handles[i]))
			ret = obj_unpack(&x->dctx, x->bounce + i * PAGE_SIZE,
					 owners ? owners[i] : owner + (uint32_t)i, h_nsect(handles[i]),
					 out + i * PAGE_SIZE);
		else if (f->seal)
			ret = seal_open_detached(f->seal, owners ? owners[i] : owner + (uint32_t)i,
						 handles[i], x->bounce + i * PAGE_SIZE, PAGE_SIZE,
						 &f->tags[handles[i]], out + i * PAGE_SIZE);
		else if (!dio_aligned(out + i * PAGE_SIZE))
			memcpy(out + i * PAGE_SIZE, x->bounce + i * PAGE_SIZE, PAGE_SIZE);
	}
	ctx_put(x);
	return ret;
}

static int file_load(struct backend *b, uint32_t owner, const uint64_t *handles, size_t npages, void *dst)
{
	return load_pages(b, owner, NULL, handles, npages, dst);
}

static int file_load_vec(struct backend *b, const uint32_t *owners, const uint64_t *handles, size_t npages,
			 void *dst)
{
	return load_pages(b, 0, owners, handles, npages, dst);
}

static void file_release(struct backend *b, uint32_t owner, uint64_t handle)
{
	struct file_tier *f = b->priv;
	uint32_t i;
	(void)owner;

	if (!h_packed(handle) && st_maybe(f, handle)) {
		/* Not written while we hold wb_lock: once unstaged, the slot can be reused at once. */
		pthread_mutex_lock(&f->wb_lock);
		i = st_find(f, handle);
		if (i != NIL)
			f->st_slot[i] = NIL;
		pthread_mutex_unlock(&f->wb_lock);
	}
	pthread_mutex_lock(&f->lock);
	if (h_packed(handle))
		free_sectors(f, h_sector(handle), h_nsect(handle));
	else
		free_pages(f, (uint32_t)handle, 1);
	pthread_mutex_unlock(&f->lock);
}

/* ---- writeback staging ---- */

/* Write the staged objects; wb_lock held. On failure they stay staged (and readable). */
static int wb_write(struct file_tier *f)
{
	uint64_t off = (uint64_t)f->wb_base * SECTOR;
	struct fio io = {f->wb_buf, off, f->wb_len * SECTOR, true};
	int ret;

	if (!f->wb_len)
		return 0;
	ret = ring_run(&f->wb_ring, &io, 1);
	atomic_fetch_add_explicit(&f->gen, 1, memory_order_release);
	if (ret) {
		f->wb_failed = true;
		return ret;
	}
	f->wb_failed = false;
	f->wb_len = 0;
	atomic_store_explicit(&f->wb_hi, 0, memory_order_release);
	atomic_store_explicit(&f->wb_lo, 0, memory_order_release);
	return 0;
}

static int file_store_obj(struct backend *b, const void *obj, size_t len, unsigned fmt, uint32_t owner,
			  uint64_t *handle)
{
	struct file_tier *f = b->priv;
	unsigned nsect = (unsigned)((OBJ_HDR + len + SECTOR - 1) / SECTOR);
	uint16_t len16 = (uint16_t)len;
	unsigned char *o;
	uint32_t s;
	int err = 0;

	if ((fmt != OBJ_LZ4 && fmt != OBJ_ZSTD) || nsect > OBJ_MAX_SECTORS || f->seal)
		return 0; /* the caller stores the plain page instead (sealed, with encrypt) */
	pthread_mutex_lock(&f->wb_lock);
	if (f->wb_failed && wb_write(f)) {
		pthread_mutex_unlock(&f->wb_lock);
		return -EIO;
	}
	pthread_mutex_lock(&f->lock);
	s = alloc_sectors(f, nsect, &err);
	pthread_mutex_unlock(&f->lock);
	if (s == NIL) {
		pthread_mutex_unlock(&f->wb_lock);
		return err == -ENOSPC ? 0 : err;
	}
	if (f->wb_len && (s != f->wb_base + f->wb_len || (f->wb_len + nsect) * SECTOR > WB_BYTES)) {
		err = wb_write(f);
		if (err) {
			pthread_mutex_lock(&f->lock);
			free_sectors(f, s, nsect);
			pthread_mutex_unlock(&f->lock);
			pthread_mutex_unlock(&f->wb_lock);
			return err;
		}
	}
	if (!f->wb_len)
		f->wb_base = s;
	o = f->wb_buf + (size_t)(s - f->wb_base) * SECTOR;
	memcpy(o, &owner, 4);
	memcpy(o + 4, &len16, 2);
	o[6] = (unsigned char)fmt;
	o[7] = 0;
	memcpy(o + OBJ_HDR, obj, len);
	memset(o + OBJ_HDR + len, 0, nsect * SECTOR - OBJ_HDR - len);
	f->wb_len += nsect;
	atomic_store_explicit(&f->wb_hi, f->wb_base + f->wb_len, memory_order_release);
	atomic_store_explicit(&f->wb_lo, f->wb_base, memory_order_release);
	pthread_mutex_unlock(&f->wb_lock);
	*handle = FH_PACKED | (uint64_t)s << 3 | (nsect - 1);
	return 1;
}

/* Punch the free clusters beyond PUNCH_KEEP, lowest first, coalescing neighbours into one call. */
static void punch_surplus(struct file_tier *f)
{
	uint32_t batch[256];
	size_t n = 0;

	pthread_mutex_lock(&f->lock);
	if (f->count[L_BACKED] >= PUNCH_KEEP + PUNCH_BATCH) {
		while (f->count[L_BACKED] > PUNCH_KEEP && n < sizeof(batch) / sizeof(batch[0])) {
			uint32_t ci = f->head[L_BACKED];

			list_del(f, ci);
			f->cl[ci].kind = FC_PUNCHING;
			batch[n++] = ci;
		}
	}
	pthread_mutex_unlock(&f->lock);
	if (!n)
		return;
	for (size_t i = 1; i < n; i++) /* insertion sort: a few hundred at most */
		for (size_t j = i; j > 0 && batch[j - 1] > batch[j]; j--) {
			uint32_t t = batch[j];

			batch[j] = batch[j - 1];
			batch[j - 1] = t;
		}
	size_t calls = 0;

	for (size_t i = 0; i < n;) {
		size_t k = 1;
		uint64_t len = 0;

		while (i + k < n && batch[i + k] == batch[i] + k)
			k++;
		for (size_t j = i; j < i + k; j++)
			len += (uint64_t)f->cl[batch[j]].cap * PAGE_SIZE;
		punch(f, (uint64_t)batch[i] * FC_BYTES, len);
		calls++;
		i += k;
	}
	pthread_mutex_lock(&f->lock);
	f->punch_calls += calls; /* under the lock: swapoff's two movers may both get here */
	for (size_t i = 0; i < n; i++) {
		f->cl[batch[i]].kind = FC_FREE;
		f->cl[batch[i]].backed = 0;
		list_add(f, batch[i], L_CLEAN);
	}
	f->punched_clusters += n;
	pthread_mutex_unlock(&f->lock);
}

static int file_flush(struct backend *b)
{
	struct file_tier *f = b->priv;
	int ret, st;

	pthread_mutex_lock(&f->wb_lock);
	ret = wb_write(f);
	st = st_write(f);
	if (st && !ret)
		ret = st;
	pthread_mutex_unlock(&f->wb_lock);
	punch_surplus(f);
	return ret;
}

/* ---- peek: movers' reads, in whole clusters ---- */

static bool ra_inflight(const struct file_tier *f)
{
	for (unsigned i = 0; i < 2 * RA_STREAMS; i++)
		if (f->win[i].inflight)
			return true;
	return false;
}

static void ra_reap(struct file_tier *f, bool wait)
{
	struct io_uring_cqe *cqe;

	while (ra_inflight(f)) {
		int r = wait ? io_uring_wait_cqe(&f->ra_ring, &cqe) : io_uring_peek_cqe(&f->ra_ring, &cqe);

		if (r == -EINTR)
			continue;
		if (r)
			return;
		struct ra_win *w = &f->win[io_uring_cqe_get_data64(cqe)];

		w->res = cqe->res;
		w->inflight = false;
		io_uring_cqe_seen(&f->ra_ring, cqe);
		wait = false;
	}
}

static void ra_queue(struct file_tier *f, struct ra_win *w, uint32_t ci)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&f->ra_ring);

	w->cluster = NIL;
	if (!sqe)
		return;
	w->cluster = ci;
	w->gen = atomic_load_explicit(&f->gen, memory_order_acquire);
	w->inflight = true;
	io_uring_prep_read(sqe, 0, w->buf, (unsigned)f->cl[ci].cap * PAGE_SIZE, ci * FC_BYTES);
	sqe->flags |= IOSQE_FIXED_FILE;
	io_uring_sqe_set_data64(sqe, (uint64_t)(w - f->win));
	if (io_uring_submit(&f->ra_ring) != 1) {
		w->inflight = false;
		w->cluster = NIL;
	}
}

/*
 * The window holding cluster @ci, read now if needed (the next cluster in use goes in flight). Each
 * mover (backend_stream) reads through its own pair of windows.
 */
static struct ra_win *ra_get(struct file_tier *f, uint32_t ci)
{
	struct ra_win *pair = &f->win[2 * (backend_stream % RA_STREAMS)], *w = NULL, *other;
	uint32_t next;

	for (int i = 0; i < 2; i++)
		if (pair[i].cluster == ci)
			w = &pair[i];
	if (w) {
		while (w->inflight)
			ra_reap(f, true);
		if (w->res != (int)(f->cl[ci].cap * PAGE_SIZE) ||
		    w->gen != atomic_load_explicit(&f->gen, memory_order_acquire))
			w->cluster = NIL;
		else
			goto prefetch;
	}
	w = pair[0].inflight ? &pair[1] : &pair[0];
	while (w->inflight)
		ra_reap(f, true);
	ra_queue(f, w, ci);
	while (w->inflight)
		ra_reap(f, true);
	if (w->cluster != ci || w->res != (int)(f->cl[ci].cap * PAGE_SIZE)) {
		w->cluster = NIL;
		return NULL;
	}
prefetch:
	other = &pair[w == &pair[0]];
	pthread_mutex_lock(&f->lock);
	for (next = ci + 1; next < f->nr_clusters && next < ci + 64; next++)
		if (f->cl[next].kind == f->cl[ci].kind)
			break;
	pthread_mutex_unlock(&f->lock);
	if (next < f->nr_clusters && next < ci + 64 && other->cluster != next) {
		while (other->inflight)
			ra_reap(f, true);
		ra_queue(f, other, next);
	}
	return w;
}

/* peek() of plain slot @h whose bytes as on disk are at @src. */
static ssize_t peek_plain(struct file_tier *f, uint32_t owner, uint64_t h, const void *src, void *obj,
			  unsigned *fmt)
{
	*fmt = OBJ_PLAIN;
	if (f->seal)
		return seal_open_detached(f->seal, owner, h, src, PAGE_SIZE, &f->tags[h], obj)
			       ? -EIO
			       : (ssize_t)PAGE_SIZE;
	memcpy(obj, src, PAGE_SIZE);
	return PAGE_SIZE;
}

static ssize_t file_peek(struct backend *b, uint32_t owner, uint64_t h, void *obj, unsigned *fmt)
{
	struct file_tier *f = b->priv;
	unsigned char sect[OBJ_MAX_SECTORS * SECTOR];
	const unsigned char *src;
	struct ra_win *w;
	uint32_t ci;
	uint16_t len;
	uint32_t o;

	if (h_packed(h) && wb_copy(f, h_sector(h), h_nsect(h), sect)) {
		src = sect;
		goto unpack;
	}
	if (!h_packed(h) && st_copy(f, h, sect))
		return peek_plain(f, owner, h, sect, obj, fmt);
	ci = h_packed(h) ? h_sector(h) / FC_SECTORS : (uint32_t)(h / FC_PAGES);
	if (ci >= f->nr_clusters)
		return -EIO;
	pthread_mutex_lock(&f->ra_lock);
	w = ra_get(f, ci);
	if (!w) {
		pthread_mutex_unlock(&f->ra_lock);
		return -EIO;
	}
	if (!h_packed(h)) {
		ssize_t ret = peek_plain(f, owner, h, w->buf + (h % FC_PAGES) * PAGE_SIZE, obj, fmt);

		pthread_mutex_unlock(&f->ra_lock);
		return ret;
	}
	memcpy(sect, w->buf + (size_t)(h_sector(h) % FC_SECTORS) * SECTOR, h_nsect(h) * SECTOR);
	pthread_mutex_unlock(&f->ra_lock);
	src = sect;
unpack:
	memcpy(&o, src, 4);
	memcpy(&len, src + 4, 2);
	if (o != owner || OBJ_HDR + len > h_nsect(h) * SECTOR || (src[6] != OBJ_LZ4 && src[6] != OBJ_ZSTD))
		return -EIO;
	memcpy(obj, src + OBJ_HDR, len);
	*fmt = src[6];
	return len;
}

static void file_stats(struct backend *b, struct uswap_tier_stats *st)
{
	struct file_tier *f = b->priv;

	pthread_mutex_lock(&f->lock);
	st->data_bytes = f->used_pages * PAGE_SIZE + f->used_sectors * SECTOR;
	st->used_bytes = (uint64_t)f->clusters_in_use * FC_BYTES;
	st->capacity_bytes = f->nr_slots * PAGE_SIZE;
	st->meta_bytes = (uint64_t)f->fresh * sizeof(struct fcluster) +
			 (f->tags ? f->used_pages * sizeof(*f->tags) : 0);
	st->split_stores = f->split_stores;
	st->released_bytes = f->punched_clusters * FC_BYTES;
	pthread_mutex_unlock(&f->lock);
}

int file_layout(struct backend *b, struct file_layout *l)
{
	struct file_tier *f = b->priv;

	if (b->ops != &file_backend_ops)
		return -EINVAL;
	pthread_mutex_lock(&f->lock);
	l->clusters = f->nr_clusters;
	l->clusters_in_use = f->clusters_in_use;
	l->clusters_free_backed = f->count[L_BACKED];
	l->clusters_packed = 0;
	for (uint32_t ci = 0; ci < f->nr_clusters; ci++)
		l->clusters_packed += f->cl[ci].kind == FC_PACKED_KIND;
	l->used_pages = f->used_pages;
	l->used_sectors = f->used_sectors;
	l->split_stores = f->split_stores;
	l->punched_clusters = f->punched_clusters;
	l->punch_calls = f->punch_calls;
	l->fd = f->fd;
	pthread_mutex_unlock(&f->lock);
	pthread_mutex_lock(&f->wb_lock);
	l->staged_pages = f->st_pages;
	l->stage_writes = f->st_writes;
	l->staged_now = f->st_len;
	pthread_mutex_unlock(&f->wb_lock);
	return 0;
}

const struct uswap_backend_ops file_backend_ops = {
	.name = "file",
	.caps = BACKEND_DURABLE | BACKEND_BATCH | BACKEND_PACKED,
	.open = file_open,
	.close = file_close,
	.store = file_store,
	.load = file_load,
	.load_vec = file_load_vec,
	.release = file_release,
	.flush = file_flush,
	.peek = file_peek,
	.store_obj = file_store_obj,
	.stats = file_stats,
};
