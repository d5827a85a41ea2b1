/*
 * codec.c - the lz4 / zstd switch. Foreign error codes (zstd's size_t errors) end here.
 */
#include "backend/codec.h"

#include <errno.h>
#include <lz4.h>
#define ZSTD_STATIC_LINKING_ONLY /* ZSTD_initStaticCCtx: contexts in memory we allocate up front */
#include <stdatomic.h>
#include <zstd.h>

#include "backend/backend.h"
#include "util/alloc.h"

static size_t zstd_cwork_size(int level)
{
	return ZSTD_estimateCCtxSize_usingCParams(ZSTD_getCParams(level, PAGE_SIZE, 0));
}

int codec_init(struct codec *c, enum codec_kind kind, int level, unsigned nr_ctx)
{
	c->kind = kind;
	c->level = level;
	c->nr_ctx = nr_ctx ? nr_ctx : 1;
	c->ctx = ualloc_zero(c->nr_ctx * sizeof(*c->ctx));
	if (!c->ctx)
		return -ENOMEM;
	for (unsigned i = 0; i < c->nr_ctx; i++) {
		struct codec_ctx *x = &c->ctx[i];

		pthread_mutex_init(&x->lock, NULL);
		x->buf = ualloc_aligned(64, 2 * PAGE_SIZE);
		if (!x->buf)
			goto out_destroy;
		if (kind == CODEC_LZ4) {
			x->lz4_state = ualloc_aligned(64, (size_t)LZ4_sizeofState());
			if (!x->lz4_state)
				goto out_destroy;
			continue;
		}
		size_t csz = zstd_cwork_size(level), dsz = ZSTD_estimateDCtxSize();

		x->cwork = ualloc_aligned(64, csz);
		x->dwork = ualloc_aligned(64, dsz);
		if (!x->cwork || !x->dwork)
			goto out_destroy;
		x->zc = ZSTD_initStaticCCtx(x->cwork, csz);
		x->zd = ZSTD_initStaticDCtx(x->dwork, dsz);
		if (!x->zc || !x->zd)
			goto out_destroy;
		ZSTD_CCtx_setParameter(x->zc, ZSTD_c_compressionLevel, level);
		ZSTD_CCtx_setParameter(x->zc, ZSTD_c_checksumFlag, 0);
		ZSTD_CCtx_setParameter(x->zc, ZSTD_c_contentSizeFlag, 0);
		ZSTD_CCtx_setParameter(x->zc, ZSTD_c_format, ZSTD_f_zstd1_magicless);
		ZSTD_DCtx_setParameter(x->zd, ZSTD_d_format, ZSTD_f_zstd1_magicless);
	}
	return 0;

out_destroy:
	codec_destroy(c);
	return -ENOMEM;
}

void codec_destroy(struct codec *c)
{
	if (!c->ctx)
		return;
	for (unsigned i = 0; i < c->nr_ctx; i++) {
		struct codec_ctx *x = &c->ctx[i];

		pthread_mutex_destroy(&x->lock);
		ufree(x->buf);
		ufree(x->lz4_state);
		ufree(x->cwork);
		ufree(x->dwork);
	}
	ufree(c->ctx);
	c->ctx = NULL;
}

struct codec_ctx *codec_get(struct codec *c)
{
	static _Atomic unsigned next_slot;
	static _Thread_local unsigned slot_plus1;
	unsigned mine;

	if (!slot_plus1)
		slot_plus1 = atomic_fetch_add(&next_slot, 1) + 1;
	mine = (slot_plus1 - 1) % c->nr_ctx;
	for (unsigned i = 0; i < c->nr_ctx; i++) {
		struct codec_ctx *x = &c->ctx[(mine + i) % c->nr_ctx];

		if (!pthread_mutex_trylock(&x->lock))
			return x;
	}
	pthread_mutex_lock(&c->ctx[mine].lock);
	return &c->ctx[mine];
}

void codec_put(struct codec_ctx *x)
{
	pthread_mutex_unlock(&x->lock);
}

size_t codec_compress(struct codec *c, struct codec_ctx *x, const void *src, void *dst, size_t cap)
{
	if (c->kind == CODEC_LZ4) {
		int n = LZ4_compress_fast_extState(x->lz4_state, src, dst, PAGE_SIZE, (int)cap, 1);

		return n > 0 ? (size_t)n : 0;
	}
	size_t n = ZSTD_compress2(x->zc, dst, cap, src, PAGE_SIZE);

	return ZSTD_isError(n) ? 0 : n;
}

int codec_decompress(struct codec *c, struct codec_ctx *x, const void *src, size_t len, void *dst)
{
	if (c->kind == CODEC_LZ4)
		return LZ4_decompress_safe(src, dst, (int)len, PAGE_SIZE) == PAGE_SIZE ? 0 : -EIO;
	size_t n = ZSTD_decompressDCtx(x->zd, dst, PAGE_SIZE, src, len);

	return !ZSTD_isError(n) && n == PAGE_SIZE ? 0 : -EIO;
}

const char *codec_name(const struct codec *c)
{
	return c->kind == CODEC_LZ4 ? "lz4" : "zstd";
}

int codec_dctx_init(struct codec_dctx *d)
{
	size_t dsz = ZSTD_estimateDCtxSize();

	d->work = ualloc_aligned(64, dsz);
	d->zd = d->work ? ZSTD_initStaticDCtx(d->work, dsz) : NULL;
	if (!d->zd) {
		ufree(d->work);
		d->work = NULL;
		return -ENOMEM;
	}
	ZSTD_DCtx_setParameter(d->zd, ZSTD_d_format, ZSTD_f_zstd1_magicless);
	return 0;
}

void codec_dctx_destroy(struct codec_dctx *d)
{
	ufree(d->work);
	d->work = d->zd = NULL;
}

int codec_decompress_as(enum codec_kind kind, struct codec_dctx *d, const void *src, size_t len, void *dst)
{
	if (kind == CODEC_LZ4)
		return LZ4_decompress_safe(src, dst, (int)len, PAGE_SIZE) == PAGE_SIZE ? 0 : -EIO;
	size_t n = ZSTD_decompressDCtx(d->zd, dst, PAGE_SIZE, src, len);

	return !ZSTD_isError(n) && n == PAGE_SIZE ? 0 : -EIO;
}
