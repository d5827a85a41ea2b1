/*
 * bench_core.c - `uswap bench core`: the swap layer against plain liblz4 on the same pages, same run.
 * Pages: the standard mix (10% zero, 10% same-filled, 60% text-like, 20% random), one kind per folio.
 */
#include <errno.h>
#include <lz4.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "util/pagegen.h"
#include "uswap.h"

#define PS USWAP_PAGE_SIZE

struct core_opts {
	uint64_t size;
	const char *tiers;
	size_t folio;
	bool json;
};

static int parse(int argc, char **argv, struct core_opts *o)
{
	static char def[USWAP_TIERS_LEN];

	uswap_default_tiers(0, def, sizeof(def));
	o->size = 1ull << 30;
	o->tiers = def;
	o->folio = 1;
	o->json = false;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!strcmp(a, "--json")) {
			o->json = true;
		} else if (!strcmp(a, "--size") && v) {
			if (uswap_parse_size(v, 1, &o->size) || o->size < 64 * PS)
				return cli_usage_error(
					"bench core: --size \"%s\" is not a size of 256K or more", v);
			i++;
		} else if (!strcmp(a, "--tiers") && v) {
			o->tiers = v;
			i++;
		} else if (!strcmp(a, "--folio") && v) {
			char *end;
			unsigned long n = strtoul(v, &end, 10);

			if (*end || n < 1 || n > USWAP_FOLIO_MAX_PAGES)
				return cli_usage_error("bench core: --folio \"%s\" is not 1..%u pages", v,
						       USWAP_FOLIO_MAX_PAGES);
			o->folio = n;
			i++;
		} else {
			return cli_usage_error("bench core: unknown or incomplete option \"%s\"", a);
		}
	}
	return 0;
}

int bench_core(int argc, char **argv)
{
	struct core_opts o;
	struct uswap *u;
	struct uswap_stats st;
	int ret = parse(argc, argv, &o);
	size_t npages, nfolios, stored = 0, rejected_pages = 0, loaded_pages = 0, bad = 0;
	unsigned char *data, *scratch, *cbuf;
	uint32_t *coff;
	uswap_id_t *ids;
	double t0, t_raw_c, t_raw_d, t_store, t_load;
	uint64_t zpool_data = 0, zpool_used = 0, zpool_pages = 0, used_all = 0;

	if (ret)
		return ret;
	npages = o.size / PS / o.folio * o.folio;
	nfolios = npages / o.folio;
	data = malloc(npages * PS);
	scratch = malloc(o.folio * PS);
	cbuf = malloc(npages * (size_t)LZ4_compressBound(PS));
	coff = malloc((npages + 1) * sizeof(uint64_t));
	ids = calloc(nfolios, sizeof(*ids));
	if (!data || !scratch || !cbuf || !coff || !ids) {
		fprintf(stderr, "uswap: bench core: out of memory for %zu pages\n", npages);
		return 1;
	}
	for (size_t f = 0; f < nfolios; f++) {
		enum pagegen_kind k = pagegen_mix_kind(f);

		for (size_t j = 0; j < o.folio; j++)
			pagegen_fill(data + (f * o.folio + j) * PS, k, f * 1000003 + j);
	}
	ret = uswap_create(&u, o.tiers);
	if (ret) {
		fprintf(stderr, "uswap: bench core: %s\n", uswap_errmsg());
		return 2;
	}

	/* Baseline: plain liblz4, every page. Offsets are 64-bit pairs packed into coff. */
	uint64_t *off = (uint64_t *)coff, pos = 0;

	t0 = cli_now();
	for (size_t p = 0; p < npages; p++) {
		int n = LZ4_compress_default((const char *)data + p * PS, (char *)cbuf + pos, PS,
					     LZ4_compressBound(PS));

		off[p] = pos;
		pos += (uint64_t)n;
	}
	off[npages] = pos;
	t_raw_c = cli_now() - t0;

	t0 = cli_now();
	for (size_t f = 0; f < nfolios; f++) {
		if (uswap_store(u, data + f * o.folio * PS, o.folio, &ids[f]) == 0)
			stored++;
		else
			rejected_pages += o.folio;
	}
	t_store = cli_now() - t0;

	t0 = cli_now();
	for (size_t f = 0; f < nfolios; f++) {
		if (!ids[f])
			continue;
		if (uswap_load(u, ids[f], scratch, o.folio))
			bad++;
		loaded_pages += o.folio;
	}
	t_load = cli_now() - t0;

	/* Baseline decompression over the same pages the layer loaded. */
	t0 = cli_now();
	for (size_t f = 0; f < nfolios; f++) {
		if (!ids[f])
			continue;
		for (size_t j = 0; j < o.folio; j++) {
			size_t p = f * o.folio + j;

			if (LZ4_decompress_safe((const char *)cbuf + off[p], (char *)scratch + j * PS,
						(int)(off[p + 1] - off[p]), PS) != PS)
				bad++;
		}
	}
	t_raw_d = cli_now() - t0;

	/* Untimed: every loaded folio is byte-identical to what was stored. */
	for (size_t f = 0; f < nfolios; f++) {
		if (ids[f] && (uswap_load(u, ids[f], scratch, o.folio) ||
			       memcmp(scratch, data + f * o.folio * PS, o.folio * PS)))
			bad++;
	}

	uswap_stats(u, &st);
	for (unsigned t = 0; t < st.nr_tiers; t++) {
		used_all += st.tier[t].used_bytes;
		if (!strcmp(st.tier[t].name, "zpool")) {
			zpool_data += st.tier[t].data_bytes;
			zpool_used += st.tier[t].used_bytes;
			zpool_pages += st.tier[t].pages;
		}
	}
	double mb = (double)(npages * PS) / 1e6, mb_loaded = (double)(loaded_pages * PS) / 1e6;
	double store_mb_s = mb / t_store, raw_c = mb / t_raw_c;
	double load_mb_s = mb_loaded / t_load, raw_d = mb_loaded / t_raw_d;
	double meta_pp = st.pages ? (double)st.meta_bytes / (double)st.pages : 0;
	double util = zpool_used ? (double)zpool_data / (double)zpool_used : 0;
	double ratio = zpool_data ? (double)(zpool_pages * PS) / (double)zpool_data : 0;
	double eff =
		used_all + st.meta_bytes ? (double)(st.pages * PS) / (double)(used_all + st.meta_bytes) : 0;

	if (o.json) {
		printf("{\"bench\":\"core\",\"tiers\":\"%s\",\"size_bytes\":%llu,\"folio_pages\":%zu,"
		       "\"pages\":%zu,\"stored_pages\":%llu,\"rejected_pages\":%zu,"
		       "\"store_mb_s\":%.1f,\"load_mb_s\":%.1f,"
		       "\"raw_lz4_compress_mb_s\":%.1f,\"raw_lz4_decompress_mb_s\":%.1f,"
		       "\"store_vs_raw\":%.3f,\"load_vs_raw\":%.3f,"
		       "\"metadata_bytes_per_page\":%.2f,\"pool_utilization\":%.4f,"
		       "\"compression_ratio\":%.3f,\"effective_ratio\":%.3f,\"raw_lz4_ratio\":%.3f,"
		       "\"verified\":%s,\"errors\":%zu,"
		       "\"targets\":{\"metadata_bytes_per_page\":\"<=16\",\"pool_utilization\":\">=0.85\","
		       "\"store_vs_raw\":\">=0.8\",\"load_vs_raw\":\">=0.8\"}}\n",
		       o.tiers, (unsigned long long)o.size, o.folio, npages, (unsigned long long)st.pages,
		       rejected_pages, store_mb_s, load_mb_s, raw_c, raw_d, store_mb_s / raw_c,
		       load_mb_s / raw_d, meta_pp, util, ratio, eff, (double)(npages * PS) / (double)pos,
		       bad ? "false" : "true", bad);
	} else {
		printf("uswap bench core: %zu MiB, tiers \"%s\", folios of %zu pages\n", npages * PS >> 20,
		       o.tiers, o.folio);
		printf("  stored %llu pages, rejected %zu (no tier took them)\n",
		       (unsigned long long)st.pages, rejected_pages);
		printf("  store   %8.1f MB/s   raw lz4 compress   %8.1f MB/s   ratio %.3f (target >= 0.8)\n",
		       store_mb_s, raw_c, store_mb_s / raw_c);
		printf("  load    %8.1f MB/s   raw lz4 decompress %8.1f MB/s   ratio %.3f (target >= 0.8)\n",
		       load_mb_s, raw_d, load_mb_s / raw_d);
		printf("  metadata %.2f bytes/page (target <= 16), pool utilization %.3f (target >= 0.85)\n",
		       meta_pp, util);
		printf("  compression ratio %.2f in the pool, %.2f overall; data verified: %s\n", ratio, eff,
		       bad ? "NO" : "yes");
		for (unsigned t = 0; t < st.nr_tiers; t++)
			printf("  tier %u %-24s pages %10llu  data %8.1f MiB  used %8.1f MiB  rejects %llu\n",
			       t, st.tier[t].spec, (unsigned long long)st.tier[t].pages,
			       (double)st.tier[t].data_bytes / 1048576.0,
			       (double)st.tier[t].used_bytes / 1048576.0,
			       (unsigned long long)st.tier[t].rejects);
	}
	uswap_destroy(u);
	free(data);
	free(scratch);
	free(cbuf);
	free(coff);
	free(ids);
	return bad ? 1 : 0;
}
