/*
 * pagegen.c - synthetic pages. Text pages draw words from a fixed vocabulary with a skewed choice, so
 * lz4 finds matches inside a page the way it does in real heaps (ratio around 2-3).
 */
#include "util/pagegen.h"

#include <string.h>

static const char *const words[] = {
	"the",     "of",      "and",     "to",     "in",      "is",      "that",     "for",     "it",
	"as",      "with",    "was",     "on",     "be",      "at",      "by",       "this",    "had",
	"not",     "are",     "but",     "from",   "or",      "have",    "an",       "they",    "which",
	"one",     "you",     "were",    "all",    "her",     "she",     "there",    "would",   "their",
	"we",      "him",     "been",    "has",    "when",    "who",     "will",     "no",      "more",
	"if",      "out",     "so",      "up",     "said",    "what",    "its",      "about",   "than",
	"into",    "them",    "can",     "only",   "other",   "time",    "new",      "some",    "could",
	"these",   "two",     "may",     "first",  "then",    "do",      "any",      "like",    "my",
	"now",     "over",    "such",    "our",    "man",     "me",      "even",     "most",    "made",
	"after",   "also",    "did",     "many",   "off",     "before",  "must",     "well",    "back",
	"through", "years",   "much",    "where",  "your",    "way",     "down",     "should",  "because",
	"each",    "just",    "those",   "people", "how",     "too",     "little",   "state",   "good",
	"very",    "make",    "world",   "still",  "own",     "see",     "men",      "work",    "long",
	"get",     "here",    "between", "both",   "life",    "being",   "under",    "never",   "day",
	"same",    "another", "know",    "while",  "last",    "might",   "us",       "great",   "old",
	"year",    "off",     "come",    "since",  "against", "go",      "came",     "right",   "used",
	"take",    "three",   "struct",  "return", "static",  "const",   "uint64_t", "buffer",  "pointer",
	"value",   "index",   "memory",  "page",   "swap",    "request", "response", "user_id", "timestamp",
	"session", "config",  "error",   "status", "null",
};

#define NR_WORDS (sizeof(words) / sizeof(words[0]))

void pagegen_fill(void *page, enum pagegen_kind kind, uint64_t seed)
{
	unsigned char *p = page;
	uint64_t s = pagegen_mix(seed), w;
	size_t off = 0;

	switch (kind) {
	case PG_ZERO:
		memset(p, 0, 4096);
		return;
	case PG_SAME:
		w = s | 1; /* never zero: zero pages are their own kind */
		for (size_t i = 0; i < 4096; i += 8)
			memcpy(p + i, &w, 8);
		return;
	case PG_RANDOM:
		for (size_t i = 0; i < 4096; i += 8) {
			s = pagegen_mix(s);
			memcpy(p + i, &s, 8);
		}
		return;
	case PG_TEXT:
		break;
	}
	while (off < 4096) {
		const char *wd;
		size_t len;

		s = pagegen_mix(s);
		/* min of two draws skews toward common words */
		unsigned a = (unsigned)(s % NR_WORDS), b = (unsigned)((s >> 16) % NR_WORDS);

		wd = words[a < b ? a : b];
		len = strlen(wd);
		if ((s >> 40) % 11 == 0) { /* a number now and then */
			char num[24];
			int n = 0;
			uint64_t v = (s >> 20) % 100000;

			do
				num[n++] = (char)('0' + v % 10);
			while ((v /= 10) && n < 23);
			for (int k = 0; k < n && off < 4096; k++)
				p[off++] = (unsigned char)num[n - 1 - k];
		} else {
			for (size_t k = 0; k < len && off < 4096; k++)
				p[off++] = (unsigned char)wd[k];
		}
		if (off < 4096)
			p[off++] = (s >> 56) % 13 == 0 ? '\n' : ((s >> 50) % 17 == 0 ? ',' : ' ');
	}
}

enum pagegen_kind pagegen_mix_kind(uint64_t seed)
{
	unsigned r = (unsigned)(pagegen_mix(seed) % 100);

	if (r < 10)
		return PG_ZERO;
	if (r < 20)
		return PG_SAME;
	if (r < 80)
		return PG_TEXT;
	return PG_RANDOM;
}
