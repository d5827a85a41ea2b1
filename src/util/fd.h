/*
 * fd.h - the library's long-lived file descriptors: placed high in the table and known by number.
 *
 * A program run under the preload library shares its descriptor table with the library. A shell's
 * `exec 6>file` dup2()s onto whatever fd 6 is, and a daemon's close-all loop closes every descriptor:
 * either took a userfaultfd away (the program then crashed on its next swapped page). So the
 * userfaultfds, the swap file and the io_uring rings are moved near the top of the table, out of the
 * way of the small numbers programs pick, and the preload library's close(), close_range(),
 * closefrom(), dup2() and dup3() leave the ones kept here alone.
 */
#ifndef USWAP_UTIL_FD_H
#define USWAP_UTIL_FD_H

#include <stdbool.h>

/* Move @fd high (close-on-exec) and keep it. Return: the new number (@fd itself if it cannot move). */
int fd_keep(int fd);

/* @fd is no longer the library's (about to be closed by code that does not know it was kept). */
void fd_forget(int fd);

/* Forget and close @fd (nothing if < 0). */
void fd_close(int fd);

bool fd_kept(int fd);

/* The lowest kept fd >= @from, or -1. */
int fd_kept_from(int from);

#endif
