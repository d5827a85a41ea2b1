/*
 * fakeredis.h - a fake Redis server for the remote tier's bad-input tests (test_redis_replies): a
 * thread of the test listening on a loopback port, speaking RESP. By default it answers the commands
 * the tier sends as a Redis server would (a key space of its own, with TTLs; as a single server, or as a
 * cluster node that serves every slot), so a layer opens and works against it; scripts then make
 * chosen commands get replies a real server never sends: wrong types, truncated replies, garbage,
 * huge declared lengths, silence, a closed connection, redirects to nowhere. Only for what a real
 * redis-server cannot be made to do: the rest of the tests use tests/rserver.c. FAKE_DEBUG=1 in the
 * environment prints each command it receives on stderr.
 */
#ifndef USWAP_TEST_FAKEREDIS_H
#define USWAP_TEST_FAKEREDIS_H

#include <stdbool.h>
#include <stddef.h>

struct fake_redis;

/* What the connection does after a scripted reply. */
enum fake_action {
	FAKE_REPLY,   /* send it, go on serving */
	FAKE_CLOSE,   /* send it, close the connection */
	FAKE_STALL,   /* send it, then never answer on this connection again (nor read it) */
	FAKE_TRICKLE, /* send it a byte at a time, then a filler byte every 20 ms for ever */
	FAKE_FLOOD,   /* send it, then filler bytes as fast as the client takes them, for ever */
};

/*
 * fake_start() - listen on 127.0.0.1 (a port the kernel picks) and serve from a thread. @cluster:
 * answer CLUSTER INFO and CLUSTER SLOTS as a node serving all 16384 slots. Return: 0, or -1.
 */
int fake_start(struct fake_redis **out, bool cluster);
int fake_port(const struct fake_redis *f);
/* Stop the thread, close every connection, free. */
void fake_stop(struct fake_redis *f);

/*
 * fake_script() - the matching commands from the @skip+1-th on, @count of them (0: all), get @reply
 * (@len bytes, raw RESP or not) then @action, and are not carried out (a refused SET stores nothing).
 * @cmd: the command name ("GET", "SET", "CLUSTER SLOTS", "CONFIG GET"; "*" any); @key_has: only
 * commands whose first argument contains it (NULL: any). A later script for the same commands
 * replaces the earlier one. fake_clear() removes every script.
 */
void fake_script(struct fake_redis *f, const char *cmd, const char *key_has, unsigned skip, unsigned count,
		 const void *reply, size_t len, enum fake_action action);
void fake_clear(struct fake_redis *f);

/*
 * fake_mutate() - from now on every command is carried out and its true reply is handed to @fn, which
 * may rewrite it in place (room for @cap bytes) and return the new length (or -1: unchanged), and may
 * pick what the connection does after it (*@action, preset to FAKE_REPLY). Scripts come first. NULL:
 * off. @fn runs on the server's thread, under its lock: it must not call fake_*().
 */
typedef long (*fake_mutate_fn)(void *arg, const char *cmd, unsigned char *reply, size_t len, size_t cap,
			       enum fake_action *action);
void fake_mutate(struct fake_redis *f, fake_mutate_fn fn, void *arg);

/*
 * How many commands named @cmd ("*": all) it has received; connections it has accepted, and in
 * *@closed (if not NULL) how many it has closed: a connection the client closed is closed once every
 * command sent on it has been carried out.
 */
unsigned long fake_count(struct fake_redis *f, const char *cmd);
unsigned long fake_connections(struct fake_redis *f, unsigned long *closed);
/* Keys it holds now whose name contains @has (NULL: all). */
unsigned long fake_keys(struct fake_redis *f, const char *has);

#endif
