/* A stand-in for libnccl.so.2 that records the arguments it receives, so the
   tests can check that libtpcomm_nccl.so forwards every call unchanged. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct { char internal[128]; } ncclUniqueId;
static char journal[8192];

static void note(const char *s) {
  size_t n = strlen(journal);
  snprintf(journal + n, sizeof(journal) - n, "%s;", s);
}

const char *fake_journal(void) { return journal; }

int ncclGetVersion(int *v) { *v = 22809; note("version"); return 0; }
const char *ncclGetErrorString(int r) { (void)r; return "fake error string"; }
/* As NCCL does: the id zeroed, then a bootstrap handle of 40 bytes at its
   start (FAKE_FULL_ID set: every byte written, no zero tail). */
int ncclGetUniqueId(ncclUniqueId *id) {
  memset(id->internal, 0, sizeof id->internal);
  memset(id->internal, 0x42, getenv("FAKE_FULL_ID") ? sizeof id->internal : 40);
  note("uniqueid");
  return 0;
}
int ncclSend(const void *s, size_t n, int dt, int peer, void *comm, void *st) {
  char b[160];
  snprintf(b, sizeof b, "send %p %zu %d %d %p %p", s, n, dt, peer, comm, st);
  note(b);
  return 0;
}
/* The id the last ncclCommInitRank got, byte for byte. */
static ncclUniqueId last_init_id;
const char *fake_last_init_id(void) { return last_init_id.internal; }
int ncclCommInitRank(void **comm, int n, ncclUniqueId id, int rank) {
  char b[128];
  last_init_id = id;
  snprintf(b, sizeof b, "init n=%d rank=%d id0=%d id127=%d", n, rank, id.internal[0], id.internal[127]);
  note(b);
  *comm = (void *)0x1234;
  return 0;
}
/* Scalable creation: the first id is recorded as ncclCommInitRank's is. */
int ncclCommInitRankScalable(void **comm, int n, int rank, int nId, ncclUniqueId *ids, void *config) {
  char b[128];
  (void)config;
  if (nId > 0) last_init_id = ids[0];
  snprintf(b, sizeof b, "initscalable n=%d rank=%d nid=%d", n, rank, nId);
  note(b);
  *comm = (void *)0x1234;
  return 0;
}
/* Non-blocking creation (NCCL's ncclCommInitRankConfig with blocking = 0):
   in progress (ncclInProgress, 7) until ncclCommGetAsyncError has been
   asked FAKE_READY_AFTER times (default 3; 0: never ready). The config is
   not read. */
static int async_asks, ready_after;
int ncclCommInitRankConfig(void **comm, int n, ncclUniqueId id, int rank, void *config) {
  char b[128];
  (void)config;
  last_init_id = id;
  snprintf(b, sizeof b, "initconfig n=%d rank=%d", n, rank);
  note(b);
  const char *r = getenv("FAKE_READY_AFTER");
  ready_after = r ? atoi(r) : 3;
  async_asks = 0;
  *comm = (void *)0x1234;
  return 7;
}
int ncclCommGetAsyncError(void *comm, int *state) {
  (void)comm;
  async_asks++;
  *state = ready_after > 0 && async_asks >= ready_after ? 0 : 7;
  if (*state == 0) note("ready");
  return 0;
}
int ncclCommCount(void *c, int *n) {
  const char *w = getenv("FAKE_WORLD");
  (void)c;
  *n = w ? atoi(w) : 1;
  return 0;
}
int ncclCommUserRank(void *c, int *r) { (void)c; *r = 0; return 0; }
int ncclCommCuDevice(void *c, int *d) { (void)c; *d = 0; return 0; }
/* FAKE_QUIET set: all-reduces are not journaled (the overhead test makes
   hundreds of thousands of calls and times the library, not the journal). */
static int quiet = -1;
int ncclAllReduce(const void *s, void *r, size_t n, int dt, int op, void *comm, void *st) {
  char b[160];
  if (quiet < 0) quiet = getenv("FAKE_QUIET") != NULL;
  if (quiet) return 0;
  snprintf(b, sizeof b, "allreduce %p %p %zu %d %d %p %p", s, r, n, dt, op, comm, st);
  note(b);
  return 0;
}
int ncclBroadcast(const void *s, void *r, size_t n, int dt, int root, void *comm, void *st) {
  char b[160];
  snprintf(b, sizeof b, "broadcast %p %p %zu %d %d %p %p", s, r, n, dt, root, comm, st);
  note(b);
  return 0;
}
int ncclAllGather(const void *s, void *r, size_t n, int dt, void *comm, void *st) {
  char b[160];
  snprintf(b, sizeof b, "allgather %p %p %zu %d %p %p", s, r, n, dt, comm, st);
  note(b);
  return 0;
}
int ncclReduceScatter(const void *s, void *r, size_t n, int dt, int op, void *comm, void *st) {
  char b[160];
  snprintf(b, sizeof b, "reducescatter %p %p %zu %d %d %p %p", s, r, n, dt, op, comm, st);
  note(b);
  return 0;
}
int ncclBcast(void *buf, size_t n, int dt, int root, void *comm, void *st) {
  char b[160];
  snprintf(b, sizeof b, "bcast %p %zu %d %d %p %p", buf, n, dt, root, comm, st);
  note(b);
  return 0;
}
void ncclResetDebugInit(void) { note("resetdebug"); }
int ncclGroupStart(void) { note("groupstart"); return 0; }
int ncclGroupEnd(void) { note("groupend"); return 0; }
int ncclCommDestroy(void *c) {
  char b[64];
  snprintf(b, sizeof b, "destroy %p", c);
  note(b);
  return 0;
}
