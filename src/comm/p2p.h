/*
 * p2p.h: what the pipeline (src/pp) needs of the communicator beyond the
 * collectives: communicators split from one (a stage's replicas, one
 * pipeline's stages) and point-to-point messages between neighbours,
 * posted non-blocking and waited for with the collectives' deadline
 * (CLT_TIMEOUT), naming the peer (comm/wait.c).
 */
#ifndef CLT_COMM_P2P_H
#define CLT_COMM_P2P_H

#include "comm_internal.h"

/* Collective: the ranks of comm with the same color in a communicator of
 * their own, ordered by key (MPI_Comm_split). */
int clt__comm_split(clt_comm *comm, int color, int key, clt_comm **out);

/* One message in flight: what it is (for messages: "activations of
 * micro-batch 3"), to or from whom. */
typedef struct clt__p2p_msg {
  clt__req req;
  int peer;
  size_t bytes;
  uint64_t number;
} clt__p2p_msg;

/* Post a send or receive of bytes to or from rank peer of comm with tag
 * (below clt__p2p_tag_limit); number names it in messages. */
int clt__p2p_isend(clt_comm *comm, const void *buf, size_t bytes, int peer, int tag, uint64_t number,
                   clt__p2p_msg *m);
int clt__p2p_irecv(clt_comm *comm, void *buf, size_t bytes, int peer, int tag, uint64_t number,
                   clt__p2p_msg *m);
/* Wait for m within the deadline: CLT_ETIMEDOUT naming `what`, the peer
 * and who else waits for whom; a receive of another size is
 * CLT_EMISMATCH. Waiting for a message not posted (or done) returns at
 * once. */
int clt__p2p_wait(clt_comm *comm, clt__p2p_msg *m, const char *what);
/* Move the messages in flight on comm (call it while the device computes:
 * a large message needs its sender and receiver in MPI to go). */
void clt__p2p_progress(clt_comm *comm);
/* Drop a message after a failure (a receive is cancelled). */
void clt__p2p_abandon(clt_comm *comm, clt__p2p_msg *m);

#endif
