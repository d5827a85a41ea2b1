/*
 * profile_svg.c - the plot of `uswap profile --svg FILE`, written by hand as SVG 1.1: run time (y)
 * against memory (x: a run's limit, the plain run's peak resident size, the auto run's mean limit),
 * one circle per run with its figures in a <title> (a browser shows it on hover), axes with ticks at
 * 1, 2 or 5 times a power of ten.
 */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "cli/profile.h"

#define W  720
#define H  440
#define X0 80.0 /* the plot area */
#define X1 (W - 30.0)
#define Y0 (H - 70.0)
#define Y1 50.0

static void esc(FILE *f, const char *s)
{
	for (; *s; s++) {
		switch (*s) {
		case '&':
			fputs("&amp;", f);
			break;
		case '<':
			fputs("&lt;", f);
			break;
		case '>':
			fputs("&gt;", f);
			break;
		case '"':
			fputs("&quot;", f);
			break;
		default:
			if ((unsigned char)*s >= 0x20 || *s == '\t')
				fputc(*s, f);
		}
	}
}

/* A tick step of 1, 2 or 5 times a power of ten giving about five ticks over [0, max]. */
static double tick_step(double max)
{
	double raw = max / 5, mag = pow(10, floor(log10(raw))), f = raw / mag;

	return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * mag;
}

static double run_x(const struct prun *r)
{
	if (r->kind == PRUN_LIMIT)
		return (double)r->limit_bytes / 1048576.0;
	if (r->kind == PRUN_AUTO && r->hist_n)
		return (double)r->hist_mean / 1048576.0;
	return (double)r->maxrss_bytes / 1048576.0;
}

static void axis_ticks(FILE *f, double max, double step, bool x_axis)
{
	for (double v = 0; v <= max + step / 1000; v += step) {
		double px = X0 + (X1 - X0) * v / max, py = Y0 - (Y0 - Y1) * v / max;
		char num[32];

		snprintf(num, sizeof(num), "%g", v);
		if (x_axis)
			fprintf(f,
				"<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n"
				"<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>\n"
				"<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n",
				px, Y0, px, Y1, px, Y0, px, Y0 + 5, px, Y0 + 20, num);
		else
			fprintf(f,
				"<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n"
				"<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>\n"
				"<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n",
				X0, py, X1, py, X0 - 5, py, X0, py, X0 - 8, py + 4, num);
	}
}

void profile_svg(FILE *f, const struct prun *runs, size_t n, const char *title)
{
	double xmax = 0, ymax = 0, xs, ys;

	for (size_t i = 0; i < n; i++) {
		xmax = fmax(xmax, run_x(&runs[i]));
		ymax = fmax(ymax, runs[i].secs);
	}
	xmax = xmax > 0 ? xmax * 1.05 : 1;
	ymax = ymax > 0 ? ymax * 1.05 : 1;
	xs = tick_step(xmax);
	ys = tick_step(ymax);
	xmax = ceil(xmax / xs) * xs;
	ymax = ceil(ymax / ys) * ys;
#define PX(v) (X0 + (X1 - X0) * (v) / xmax)
#define PY(v) (Y0 - (Y0 - Y1) * (v) / ymax)

	fprintf(f,
		"<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"no\"?>\n"
		"<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"%d\" height=\"%d\" "
		"viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"12\">\n<title>uswap profile: ",
		W, H, W, H);
	esc(f, title);
	fprintf(f,
		"</title>\n<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"white\"/>\n"
		"<text x=\"%d\" y=\"24\" text-anchor=\"middle\" font-size=\"14\">",
		W, H, W / 2);
	esc(f, title);
	fputs("</text>\n<g class=\"axes\">\n", f);
	axis_ticks(f, xmax, xs, true);
	axis_ticks(f, ymax, ys, false);
	fprintf(f,
		"<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>\n"
		"<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>\n"
		"<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">memory, MiB (the limit; plain: peak "
		"resident "
		"size; auto: mean limit)</text>\n"
		"<text x=\"20\" y=\"%.1f\" text-anchor=\"middle\" transform=\"rotate(-90 20 %.1f)\">run "
		"time, "
		"s</text>\n</g>\n",
		X0, Y0, X1, Y0, X0, Y0, X0, Y1, (X0 + X1) / 2, Y0 + 45, (Y0 + Y1) / 2, (Y0 + Y1) / 2);

	/* the plain time across, the fixed limits joined in order of memory, the auto limit's range */
	fprintf(f,
		"<line class=\"plain-time\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#888\" "
		"stroke-dasharray=\"4 4\"/>\n",
		X0, PY(runs[0].secs), X1, PY(runs[0].secs));
	fputs("<polyline class=\"limits\" fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"1.5\" points=\"",
	      f);
	for (double last = -1;;) {
		const struct prun *next = NULL;

		for (size_t i = 0; i < n; i++)
			if (runs[i].kind == PRUN_LIMIT && run_x(&runs[i]) > last &&
			    (!next || run_x(&runs[i]) < run_x(next)))
				next = &runs[i];
		if (!next)
			break;
		last = run_x(next);
		fprintf(f, "%.1f,%.1f ", PX(last), PY(next->secs));
	}
	fputs("\"/>\n", f);
	for (size_t i = 0; i < n; i++) {
		const struct prun *r = &runs[i];
		uint64_t hi = 0;

		if (r->kind != PRUN_AUTO || !r->hist_n)
			continue;
		for (uint32_t j = 1; j < r->hist_n; j++)
			hi = r->hist[j] > hi ? r->hist[j] : hi;
		fprintf(f,
			"<line class=\"auto-range\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
			"stroke=\"#d62728\" "
			"stroke-width=\"3\" stroke-opacity=\"0.35\"><title>the auto limit over the run: %.1f "
			"to %.1f "
			"MiB</title></line>\n",
			PX(fmin(r->hist_lowest / 1048576.0, xmax)), PY(r->secs),
			PX(fmin(hi / 1048576.0, xmax)), PY(r->secs), r->hist_lowest / 1048576.0,
			hi / 1048576.0);
	}

	/* the runs, in the table's order */
	for (size_t i = 0; i < n; i++) {
		const struct prun *r = &runs[i];
		static const char *cls[] = {"plain", "limit", "auto"};
		static const char *fill[] = {"white", "#1f77b4", "#d62728"};
		bool wrong = r->kind != PRUN_PLAIN && !r->output_ok;
		double x = PX(run_x(r)), y = PY(r->secs);

		fprintf(f,
			"<circle class=\"run %s%s\" id=\"run-%zu\" cx=\"%.1f\" cy=\"%.1f\" r=\"%d\" "
			"fill=\"%s\" "
			"stroke=\"%s\" stroke-width=\"2\"><title>",
			cls[r->kind], wrong ? " wrong" : "", i, x, y, r->kind == PRUN_LIMIT ? 5 : 7,
			fill[r->kind], wrong ? "#ff00ff" : "black");
		esc(f, r->label);
		fprintf(f, ": %.3f s at %.1f MiB%s</title></circle>\n", r->secs, run_x(r),
			r->timed_out ? ", stopped at the timeout"
			: wrong      ? ", WRONG output"
				     : "");
		/* the auto run's name below its point, the others' above: the two often meet */
		fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\"%s>", x + 9,
			r->kind == PRUN_AUTO ? y + 18 : y - 8, wrong ? " fill=\"#ff00ff\"" : "");
		esc(f, r->kind == PRUN_PLAIN ? "plain" : r->kind == PRUN_AUTO ? "auto" : r->label);
		fputs(r->timed_out ? " (timeout)" : wrong ? " (WRONG)" : "", f);
		fputs("</text>\n", f);
	}

	/* legend */
	fprintf(f,
		"<g class=\"legend\" font-size=\"11\">\n"
		"<circle cx=\"%.1f\" cy=\"%.1f\" r=\"6\" fill=\"white\" stroke=\"black\" stroke-width=\"2\"/>"
		"<text x=\"%.1f\" y=\"%.1f\">plain run (its peak)</text>\n"
		"<circle cx=\"%.1f\" cy=\"%.1f\" r=\"5\" fill=\"#1f77b4\" stroke=\"black\" "
		"stroke-width=\"2\"/>"
		"<text x=\"%.1f\" y=\"%.1f\">--limit</text>\n"
		"<circle cx=\"%.1f\" cy=\"%.1f\" r=\"6\" fill=\"#d62728\" stroke=\"black\" "
		"stroke-width=\"2\"/>"
		"<text x=\"%.1f\" y=\"%.1f\">--limit auto (its range: the bar)</text>\n</g>\n</svg>\n",
		X0 + 10, H - 14.0, X0 + 20, H - 10.0, X0 + 180, H - 14.0, X0 + 190, H - 10.0, X0 + 270,
		H - 14.0, X0 + 280, H - 10.0);
#undef PX
#undef PY
}
