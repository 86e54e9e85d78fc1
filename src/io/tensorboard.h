/*
 * tensorboard.h: TensorFlow event files that TensorBoard reads, for
 * scalars: one file per run in a directory, each record an Event message
 * (protobuf-c, tb_event.proto) framed as TensorFlow's record files frame
 * them: the length (8 bytes, little endian), its masked CRC32C, the
 * message, its masked CRC32C.
 */
#ifndef CLT_IO_TENSORBOARD_H
#define CLT_IO_TENSORBOARD_H

#include <stddef.h>
#include <stdint.h>

typedef struct clt__tb clt__tb;

/* Create dir (mkdir -p) and in it a new events.out.tfevents.* file,
 * starting with the file-version event. */
int clt__tb_open(const char *dir, clt__tb **out);
/* One event at `step` with the n scalars tags[i] = values[i] (NaN values
 * left out), flushed to the file. */
int clt__tb_scalars(clt__tb *w, int64_t step, int n, const char *const *tags, const double *values);
const char *clt__tb_path(const clt__tb *w);
void clt__tb_close(clt__tb *w);

/* CRC-32C (Castagnoli), as TensorFlow's records use; crc is the running
 * value (0 to start). */
uint32_t clt__crc32c(uint32_t crc, const void *data, size_t n);

#endif
