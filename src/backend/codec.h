/*
 * codec.h - lz4 or zstd on 4 KiB pages, with state sized at open so the reclaim path allocates nothing.
 * A codec owns nr_ctx contexts; a caller takes one (codec_get), uses it, and puts it back.
 */
#ifndef USWAP_CODEC_H
#define USWAP_CODEC_H

#include <pthread.h>
#include <stddef.h>

enum codec_kind { CODEC_LZ4, CODEC_ZSTD };

struct codec_ctx {
	pthread_mutex_t lock;
	void *lz4_state; /* LZ4_sizeofState() bytes */
	void *zc, *zd;   /* static ZSTD_CCtx / ZSTD_DCtx inside cwork / dwork */
	void *cwork, *dwork;
	unsigned char *buf; /* staging: 2 pages, compressed output before it is placed */
};

struct codec {
	enum codec_kind kind;
	int level;
	unsigned nr_ctx;
	struct codec_ctx *ctx;
};

int codec_init(struct codec *c, enum codec_kind kind, int level, unsigned nr_ctx);
void codec_destroy(struct codec *c);
/* Context: any; blocks only when every context is busy. */
struct codec_ctx *codec_get(struct codec *c);
void codec_put(struct codec_ctx *x);
/* Compress one page into @dst; Return: compressed length, or 0 when it does not fit in @cap bytes. */
size_t codec_compress(struct codec *c, struct codec_ctx *x, const void *src, void *dst, size_t cap);
/* Decompress exactly one page. Return: 0; -EIO when @src is not a valid page. @x may be NULL for lz4. */
int codec_decompress(struct codec *c, struct codec_ctx *x, const void *src, size_t len, void *dst);
static inline int codec_needs_ctx_to_load(const struct codec *c)
{
	return c->kind != CODEC_LZ4;
}
const char *codec_name(const struct codec *c);

/* A decompressor alone, for a tier holding pages another tier compressed (lz4 needs no state). */
struct codec_dctx {
	void *work, *zd; /* static ZSTD_DCtx inside work */
};
int codec_dctx_init(struct codec_dctx *d);
void codec_dctx_destroy(struct codec_dctx *d);
/* Decompress exactly one page of @kind. Return: 0; -EIO when @src is not a valid page. */
int codec_decompress_as(enum codec_kind kind, struct codec_dctx *d, const void *src, size_t len, void *dst);

#endif
