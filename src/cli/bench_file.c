/*
 * bench_file.c - `uswap bench file [--json] [--size SIZE]`: the swap-file tier against plain io_uring
 * reads of the same file, in one run. Pages are text-like (so the pool can take them back).
 *  1. stack "file,zpool": SIZE of 64-page folios stored into the file (store_mb_s); the device's own
 *     sequential read (2 MiB reads, 4 in flight) and 4 KiB random read, interleaved with 4 KiB loads
 *     through the layer; swapoff of the file into the pool, pages stored plain (swapoff_plain_*).
 *  2. stack "zpool,file": SIZE stored into the pool, all of it written back (compressed) to the file,
 *     then swapoff of the file back into the pool (swapoff_*; the headline: pool -> file -> pool).
 *  3. a churn of random folio sizes and frees on a small file: fragmentation and split folios.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <lz4.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cli/cli.h"
#include "util/pagegen.h"
#include "uswap.h"

#define PS        USWAP_PAGE_SIZE
#define FOLIO     64
#define NR_LAT    4000
#define SRC_PAGES 8192 /* 32 MiB of distinct pages, stored round and round */

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double pct(double *v, size_t n, double p)
{
	qsort(v, n, sizeof(*v), cmp_double);
	return v[(size_t)(p * (double)(n - 1))];
}

static uint64_t rnd(uint64_t *s)
{
	*s = *s * 6364136223846793005ull + 1442695040888963407ull;
	return *s >> 33;
}

/* Plain io_uring reads of @len bytes at @off, QD @qd, @nr requests at consecutive offsets. */
static int raw_read(struct io_uring *r, int fd, void *buf, size_t len, uint64_t off, size_t nr, unsigned qd)
{
	size_t sub = 0, done = 0;

	while (done < nr) {
		struct io_uring_cqe *cqe;

		while (sub < nr && sub - done < qd) {
			struct io_uring_sqe *sqe = io_uring_get_sqe(r);

			io_uring_prep_read(sqe, fd, (char *)buf + (sub % qd) * len, (unsigned)len,
					   off + sub * len);
			sub++;
		}
		if (io_uring_submit_and_wait(r, 1) < 0 || io_uring_wait_cqe(r, &cqe))
			return -EIO;
		if (cqe->res != (int)len)
			return -EIO;
		io_uring_cqe_seen(r, cqe);
		done++;
	}
	return 0;
}

/* The statistics of the layer's file tier (its first). */
static const struct uswap_tier_stats *file_stats(struct uswap *u, struct uswap_stats *st)
{
	uswap_stats(u, st);
	for (unsigned t = 0; t < st->nr_tiers; t++)
		if (!strcmp(st->tier[t].name, "file"))
			return &st->tier[t];
	return &st->tier[USWAP_MAX_TIERS - 1]; /* all zero */
}

struct result {
	double store_mb_s, seq_mb_s, rand_p50, rand_p99, load_p50, load_p99, load_mb_s;
	double swapoff_plain_mb_s, swapoff_mb_s, swapoff_file_mb_s, writeback_mb_s;
	double file_bytes_compressed, frag, split_ratio, frag_max, lz4_mb_s;
	uint64_t punched;
};

static unsigned char *src_pages(void)
{
	unsigned char *p = malloc((size_t)SRC_PAGES * PS);

	for (size_t i = 0; p && i < SRC_PAGES; i++)
		pagegen_fill(p + i * PS, PG_TEXT, i * 7919 + 1);
	return p;
}

/*
 * The tier's file opened again: a named swap file loses its name when the tier opens it, so it is
 * found among this process's descriptors as "PATH (deleted)". Return: a descriptor, or -1.
 */
static int open_unlinked(const char *path, int flags)
{
	char want[128], link[128], fdpath[300];
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int fd = -1;

	snprintf(want, sizeof(want), "%s (deleted)", path);
	while (d && fd < 0 && (e = readdir(d))) {
		ssize_t n;

		snprintf(fdpath, sizeof(fdpath), "/proc/self/fd/%s", e->d_name);
		n = readlink(fdpath, link, sizeof(link) - 1);
		if (n <= 0)
			continue;
		link[n] = '\0';
		if (!strcmp(link, want))
			fd = open(fdpath, flags);
	}
	if (d)
		closedir(d);
	return fd;
}

static int phase_plain(struct result *r, const unsigned char *src, size_t nfolios, uint64_t size)
{
	struct uswap_options o = {.no_background = 1};
	static double lraw[NR_LAT], llay[NR_LAT];
	char spec[192], path[64];
	struct uswap *u;
	struct uswap_stats st;
	struct io_uring ring;
	int fd = -1;
	uswap_id_t *ids = calloc(nfolios, sizeof(*ids));
	unsigned char *buf = mmap(NULL, 8 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uint64_t seed = 42, used;
	double t;
	int ret = 1;

	/* A named file, so that the baseline reads the same file with plain io_uring reads. */
	snprintf(path, sizeof(path), "/var/tmp/uswap-bench-file.%d", (int)getpid());
	snprintf(spec, sizeof(spec), "file:%s:size=%llu,zpool:lz4:max=%llu", path,
		 (unsigned long long)(size + (64 << 20)), (unsigned long long)size);
	o.tiers = spec;
	if (!ids || buf == MAP_FAILED || uswap_create_opts(&u, &o))
		return fprintf(stderr, "uswap: bench file: %s\n", uswap_errmsg()), 1;
	fd = open_unlinked(path, O_RDONLY | O_DIRECT | O_CLOEXEC);
	if (fd < 0)
		goto out;
	t = cli_now();
	for (size_t i = 0; i < nfolios; i++)
		if (uswap_store(u, src + (i * FOLIO % SRC_PAGES) * PS, FOLIO, &ids[i]))
			goto out;
	r->store_mb_s = (double)nfolios * FOLIO * PS / (cli_now() - t) / 1e6;
	used = file_stats(u, &st)->data_bytes; /* plain pages only: no pool below the file */
	if (io_uring_queue_init(8, &ring, 0))
		goto out;
	t = cli_now();
	if (raw_read(&ring, fd, buf, 2 << 20, 0, used / (2 << 20), 4))
		goto out_ring;
	r->seq_mb_s = (double)(used / (2 << 20)) * (2 << 20) / (cli_now() - t) / 1e6;
	/* Interleaved, so that both see the same device and cache state. */
	for (int i = 0; i < NR_LAT; i++) {
		uint64_t f = rnd(&seed) % nfolios, pg = rnd(&seed) % FOLIO, slot = rnd(&seed) % (used / PS);

		t = cli_now();
		if (raw_read(&ring, fd, buf, PS, slot * PS, 1, 1))
			goto out_ring;
		lraw[i] = (cli_now() - t) * 1e6;
		t = cli_now();
		if (uswap_load_pages(u, ids[f], pg, 1, buf + PS))
			goto out_ring;
		llay[i] = (cli_now() - t) * 1e6;
		if (memcmp(buf + PS, src + ((f * FOLIO + pg) % SRC_PAGES) * PS, PS))
			goto out_ring;
	}
	r->rand_p50 = pct(lraw, NR_LAT, 0.5);
	r->rand_p99 = pct(lraw, NR_LAT, 0.99);
	r->load_p50 = pct(llay, NR_LAT, 0.5);
	r->load_p99 = pct(llay, NR_LAT, 0.99);
	t = cli_now();
	for (size_t i = 0; i < nfolios && i < 1024; i++)
		if (uswap_load(u, ids[i], buf, FOLIO))
			goto out_ring;
	r->load_mb_s = (double)(nfolios < 1024 ? nfolios : 1024) * FOLIO * PS / (cli_now() - t) / 1e6;
	t = cli_now();
	if (uswap_swapoff(u, 0))
		goto out_ring;
	r->swapoff_plain_mb_s = (double)used / (cli_now() - t) / 1e6;
	for (size_t i = 0; i < nfolios; i += nfolios / 97 + 1) {
		if (uswap_load(u, ids[i], buf, FOLIO) ||
		    memcmp(buf, src + (i * FOLIO % SRC_PAGES) * PS, FOLIO * PS))
			goto out_ring;
	}
	ret = 0;
out_ring:
	io_uring_queue_exit(&ring);
out:
	if (ret)
		fprintf(stderr, "uswap: bench file: plain phase failed: %s\n", uswap_errmsg());
	if (fd >= 0)
		close(fd);
	uswap_destroy(u);
	free(ids);
	munmap(buf, 8 << 20);
	return ret;
}

static int phase_packed(struct result *r, const unsigned char *src, size_t nfolios, uint64_t size)
{
	struct uswap_options o = {.no_background = 1};
	char spec[128];
	struct uswap *u;
	struct uswap_stats st;
	const struct uswap_tier_stats *ft;
	uswap_id_t *ids = calloc(nfolios, sizeof(*ids));
	unsigned char *buf = malloc(FOLIO * PS);
	uint64_t pages = (uint64_t)nfolios * FOLIO;
	double t;
	ssize_t n;
	int ret = 1;

	snprintf(spec, sizeof(spec), "zpool:lz4:max=%llu,file:size=%llu", (unsigned long long)size,
		 (unsigned long long)(size + (64 << 20)));
	o.tiers = spec;
	if (!ids || !buf || uswap_create_opts(&u, &o))
		return fprintf(stderr, "uswap: bench file: %s\n", uswap_errmsg()), 1;
	for (size_t i = 0; i < nfolios; i++)
		if (uswap_store(u, src + (i * FOLIO % SRC_PAGES) * PS, FOLIO, &ids[i]))
			goto out;
	t = cli_now();
	n = uswap_writeback(u, 0, pages);
	if (n != (ssize_t)pages)
		goto out;
	r->writeback_mb_s = (double)pages * PS / (cli_now() - t) / 1e6;
	ft = file_stats(u, &st);
	r->file_bytes_compressed = (double)ft->data_bytes; /* all of it packed: written back compressed */
	t = cli_now();
	if (uswap_swapoff(u, 1))
		goto out;
	t = cli_now() - t;
	r->swapoff_mb_s = (double)pages * PS / t / 1e6;
	r->swapoff_file_mb_s = (double)ft->used_bytes / t / 1e6;
	for (size_t i = 0; i < nfolios; i += nfolios / 97 + 1) {
		if (uswap_load(u, ids[i], buf, FOLIO) ||
		    memcmp(buf, src + (i * FOLIO % SRC_PAGES) * PS, FOLIO * PS))
			goto out;
	}
	ret = 0;
out:
	if (ret)
		fprintf(stderr, "uswap: bench file: writeback/swapoff phase failed: %s\n", uswap_errmsg());
	uswap_destroy(u);
	free(ids);
	free(buf);
	return ret;
}

/* Random folio sizes (most small, some 2 MiB) stored and freed at random, the file kept ~80% full. */
static int phase_churn(struct result *r, const unsigned char *src)
{
	enum { SLOTS = 4096, OPS = 60000 };
	struct uswap_options o = {.tiers = "file:size=256M", .no_background = 1};
	static uswap_id_t ids[SLOTS];
	static uint32_t npg[SLOTS];
	uint64_t seed = 7, held = 0, cap = 256ull << 20, stores = 0, samples = 0;
	struct uswap_stats st;
	const struct uswap_tier_stats *ft;
	double frag_sum = 0;
	struct uswap *u;

	if (uswap_create_opts(&u, &o))
		return 1;
	memset(ids, 0, sizeof(ids));
	for (int op = 0; op < OPS; op++) {
		size_t k = rnd(&seed) % SLOTS;

		if (ids[k]) {
			uswap_free(u, ids[k]);
			held -= npg[k] * PS;
			ids[k] = 0;
			continue;
		}
		if (held > cap * 8 / 10)
			continue;
		uint64_t x = rnd(&seed) % 100;
		uint32_t n = x < 60   ? 1
			     : x < 85 ? 1 + (uint32_t)(rnd(&seed) % 16)
			     : x < 97 ? 16 + (uint32_t)(rnd(&seed) % 112)
				      : 512;

		if (uswap_store(u, src + (rnd(&seed) % (SRC_PAGES - 512)) * PS, n, &ids[k]) == 0) {
			npg[k] = n;
			held += (uint64_t)n * PS;
			stores++;
		} else {
			ids[k] = 0;
		}
		if (op % 1000 == 999) {
			uswap_maintain(u);
			uswap_stats(u, &st);
			double f = st.tier[0].used_bytes ? 1.0 - (double)st.tier[0].data_bytes /
									   (double)st.tier[0].used_bytes
							 : 0;

			frag_sum += f;
			samples++;
			if (f > r->frag_max)
				r->frag_max = f;
		}
	}
	uswap_maintain(u);
	ft = file_stats(u, &st);
	r->frag = samples ? frag_sum / (double)samples : 0;
	r->split_ratio = stores ? (double)ft->split_stores / (double)stores : 0;
	r->punched = ft->released_bytes / (2 << 20);
	uswap_destroy(u);
	return 0;
}

int bench_file(int argc, char **argv)
{
	struct result r = {0};
	uint64_t size = 1ull << 30;
	bool json = false;
	unsigned char *src;
	size_t nfolios;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--json"))
			json = true;
		else if (!strcmp(argv[i], "--size") && i + 1 < argc &&
			 !uswap_parse_size(argv[i + 1], 0, &size) && size >= (16u << 20))
			i++;
		else
			return cli_usage_error("bench file: unknown or malformed argument \"%s\" (--json, "
					       "--size SIZE >= 16M)",
					       argv[i]);
	}
	nfolios = size / (FOLIO * PS);
	src = src_pages();
	if (!src)
		return 1;
	/* What bounds a swapoff of plain pages into the pool: plain lz4 on the same pages. */
	{
		static char out[LZ4_COMPRESSBOUND(PS)];
		double t = cli_now();

		for (size_t i = 0; i < SRC_PAGES; i++)
			LZ4_compress_default((const char *)src + i * PS, out, PS, (int)sizeof(out));
		r.lz4_mb_s = (double)SRC_PAGES * PS / (cli_now() - t) / 1e6;
	}
	if (phase_plain(&r, src, nfolios, size) || phase_packed(&r, src, nfolios, size) ||
	    phase_churn(&r, src)) {
		free(src);
		return 1;
	}
	free(src);
	if (json)
		printf("{\"size_bytes\": %llu, \"device_seq_read_mb_s\": %.1f, \"device_randread_4k_us\": "
		       "%.2f, "
		       "\"device_randread_4k_p99_us\": %.2f, \"load_4k_p50_us\": %.2f, \"load_4k_p99_us\": "
		       "%.2f, "
		       "\"load_vs_device\": %.3f, \"load_folio_mb_s\": %.1f, \"store_mb_s\": %.1f, "
		       "\"swapoff_mb_s\": %.1f, \"swapoff_vs_seq_read\": %.3f, \"swapoff_file_mb_s\": %.1f, "
		       "\"swapoff_plain_mb_s\": %.1f, \"swapoff_plain_vs_seq_read\": %.3f, "
		       "\"raw_lz4_compress_mb_s\": %.1f, \"writeback_mb_s\": %.1f, "
		       "\"writeback_file_bytes\": %.0f, \"writeback_ratio\": %.3f, "
		       "\"churn_fragmentation_avg\": %.4f, "
		       "\"churn_fragmentation_max\": %.4f, \"churn_split_folio_ratio\": %.4f, "
		       "\"churn_punched_clusters\": %llu}\n",
		       (unsigned long long)size, r.seq_mb_s, r.rand_p50, r.rand_p99, r.load_p50, r.load_p99,
		       r.load_p50 / r.rand_p50, r.load_mb_s, r.store_mb_s, r.swapoff_mb_s,
		       r.swapoff_mb_s / r.seq_mb_s, r.swapoff_file_mb_s, r.swapoff_plain_mb_s,
		       r.swapoff_plain_mb_s / r.seq_mb_s, r.lz4_mb_s, r.writeback_mb_s,
		       r.file_bytes_compressed, r.file_bytes_compressed / (double)(nfolios * FOLIO * PS),
		       r.frag, r.frag_max, r.split_ratio, (unsigned long long)r.punched);
	else
		printf("device: seq read %.1f MB/s, 4K random read p50 %.2f us (p99 %.2f)\n"
		       "layer:  4K load p50 %.2f us (%.2fx device), p99 %.2f us; store %.1f MB/s\n"
		       "swapoff pool<-file (compressed in the file): %.1f MB/s of pages (%.2fx seq read), "
		       "%.1f MB/s of file\n"
		       "swapoff pool<-file (plain pages): %.1f MB/s (%.2fx seq read; plain lz4 %.1f MB/s); "
		       "writeback %.1f MB/s\n"
		       "churn: fragmentation avg %.2f%% max %.2f%%, split folios %.2f%%, clusters punched "
		       "%llu\n",
		       r.seq_mb_s, r.rand_p50, r.rand_p99, r.load_p50, r.load_p50 / r.rand_p50, r.load_p99,
		       r.store_mb_s, r.swapoff_mb_s, r.swapoff_mb_s / r.seq_mb_s, r.swapoff_file_mb_s,
		       r.swapoff_plain_mb_s, r.swapoff_plain_mb_s / r.seq_mb_s, r.lz4_mb_s, r.writeback_mb_s,
		       r.frag * 100, r.frag_max * 100, r.split_ratio * 100, (unsigned long long)r.punched);
	return 0;
}
