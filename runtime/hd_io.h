/* hd_io: tensors to and from files.
 *
 * Formats: .npy (one tensor), .npz (a ZIP of .npy members) and .safetensors
 * (named tensors), and numeric CSV read into a 2-D f32 tensor. Every loader
 * parses a memory buffer; the path versions read the file and call the same
 * code, so a damaged or hostile file gives an error in ctx, never a crash,
 * and no allocation larger than the file justifies. Loaders never run code.
 *
 * `name` arguments are only used in messages ("weights.npz: ..."). Loaded
 * tensors are new contiguous CPU tensors owned by the caller; savers accept
 * any CPU tensor (views included) and write it row-major, little-endian. */
#ifndef HD_IO_H
#define HD_IO_H

#include "hd_tensor.h"

/* One named tensor of a dict-like file. */
typedef struct {
    char *name;
    hd_tensor *tensor;
} hd_io_entry;

/* A string pair of safetensors' "__metadata__". */
typedef struct {
    char *key;
    char *value;
} hd_io_meta;

/* An ordered list of named tensors, plus optional metadata. The list holds
 * one reference to each tensor and owns the strings. Names should be unique:
 * the savers reject duplicates, and the loaders never produce them. */
typedef struct {
    hd_io_entry *entries;
    size_t count, cap;
    hd_io_meta *meta;
    size_t nmeta, meta_cap;
} hd_io_list;

void hd_io_list_init(hd_io_list *l);
/* Drop every reference and string; leaves l empty and reusable. */
void hd_io_list_free(hd_ctx *ctx, hd_io_list *l);
/* Append (name, t), taking a new reference to t. */
hd_status hd_io_list_add(hd_ctx *ctx, hd_io_list *l, const char *name, hd_tensor *t);
hd_status hd_io_list_add_meta(hd_ctx *ctx, hd_io_list *l, const char *key, const char *value);
/* Borrowed tensor of that name (the first), or NULL. */
hd_tensor *hd_io_list_get(const hd_io_list *l, const char *name);

/* Open path for reading and refuse anything but a regular file (a FIFO, a
 * device, a socket, a directory: an HD_ERR_IO error naming the file). The
 * open does not block, even on a FIFO without a writer. On success *fd is
 * open (the caller closes it) and *size is the file's size. */
hd_status hd_io_open_regular(hd_ctx *ctx, const char *path, int *fd, uint64_t *size);
/* The whole regular file at path in memory from ctx's allocator (so it
 * counts against the memory limit), NUL-terminated: *data holds *n + 1
 * bytes, freed with hd_ctx_free(ctx, *data, *n + 1). Reads at most the size
 * the file had when opened; max_bytes, when not 0, bounds that size too. */
hd_status hd_io_read_file(hd_ctx *ctx, const char *path, size_t max_bytes, unsigned char **data,
                          size_t *n);

/* A growable byte buffer (memory allocated through ctx). */
typedef struct {
    unsigned char *data;
    size_t len, cap;
} hd_io_bytes;

void hd_io_bytes_free(hd_ctx *ctx, hd_io_bytes *b);

/* Column names of a CSV header row. */
typedef struct {
    char **names;
    size_t count;
} hd_io_strings;

void hd_io_strings_free(hd_ctx *ctx, hd_io_strings *s);

/* ---- .npy ----
 * Load: format versions 1.0, 2.0 and 3.0; descrs f2 f4 f8 i1 u1 i4 i8 b1 in
 * either byte order, and i2, u2 (as i32) and u4 (as i64), which widen
 * losslessly; Fortran order is reordered to row-major.
 * Save: version 1.0 (2.0 only if the header needs it); bf16 is an error since
 * numpy has no such dtype. */
hd_status hd_io_load_npy_buffer(hd_ctx *ctx, const char *name, const void *buf, size_t n,
                                hd_tensor **out);
hd_status hd_io_load_npy(hd_ctx *ctx, const char *path, hd_tensor **out);
/* Appends the file's bytes to out (which may be empty: {0}). */
hd_status hd_io_save_npy_bytes(hd_ctx *ctx, const char *name, const hd_tensor *t, hd_io_bytes *out);
hd_status hd_io_save_npy(hd_ctx *ctx, const char *path, const hd_tensor *t);

/* ---- .npz ----
 * Load: members stored or deflated, CRC-checked; a member "w.npy" becomes the
 * entry "w". ZIP64, encryption and other methods are errors. out is
 * initialised by the call; on error it is left empty.
 * Save: each entry as "<name>.npy", deflated (as numpy.savez_compressed) when
 * compress is nonzero, else stored (as numpy.savez). */
hd_status hd_io_load_npz_buffer(hd_ctx *ctx, const char *name, const void *buf, size_t n,
                                hd_io_list *out);
hd_status hd_io_load_npz(hd_ctx *ctx, const char *path, hd_io_list *out);
hd_status hd_io_save_npz_bytes(hd_ctx *ctx, const char *name, const hd_io_list *l, int compress,
                               hd_io_bytes *out);
hd_status hd_io_save_npz(hd_ctx *ctx, const char *path, const hd_io_list *l, int compress);

/* ---- .safetensors ----
 * Load: dtypes F16 BF16 F32 F64 I8 U8 I32 I64 BOOL, and I16, U16 (as i32)
 * and U32 (as i64); the data section must be covered exactly, without gaps or
 * overlaps, as the reference implementation requires. Entries come in data
 * order; "__metadata__" goes to l->meta. out is initialised by the call.
 * Save: entries in list order, header padded with spaces to a multiple of 8. */
hd_status hd_io_load_safetensors_buffer(hd_ctx *ctx, const char *name, const void *buf, size_t n,
                                        hd_io_list *out);
hd_status hd_io_load_safetensors(hd_ctx *ctx, const char *path, hd_io_list *out);
hd_status hd_io_save_safetensors_bytes(hd_ctx *ctx, const char *name, const hd_io_list *l,
                                       hd_io_bytes *out);
hd_status hd_io_save_safetensors(hd_ctx *ctx, const char *path, const hd_io_list *l);

/* ---- CSV ----
 * Comma-separated numbers into a [rows, cols] f32 tensor. A first row none of
 * whose cells is a number is a header: skipped, and its names returned in
 * *header when header is not NULL. Cells may be double-quoted; blank lines
 * are skipped. Ragged rows, empty or non-numeric cells are errors naming the
 * line and column; a file with no records at all is an error, and a header
 * alone gives a [0, cols] tensor. */
hd_status hd_io_read_csv_buffer(hd_ctx *ctx, const char *name, const void *buf, size_t n,
                                hd_tensor **out, hd_io_strings *header);
hd_status hd_io_read_csv(hd_ctx *ctx, const char *path, hd_tensor **out, hd_io_strings *header);

/* ---- by extension ----
 * ".npy" is one tensor; ".npz" and ".safetensors" are lists (case-insensitive
 * extensions). Load sets exactly one of *tensor (for .npy) and *list (always
 * initialised). Save takes tensor for .npy and l for the others; an unknown
 * extension, or the wrong kind of value, is an HD_ERR_ARGUMENT error. */
typedef enum { HD_IO_UNKNOWN, HD_IO_NPY, HD_IO_NPZ, HD_IO_SAFETENSORS, HD_IO_CSV } hd_io_format;

hd_io_format hd_io_format_of(const char *path);
hd_status hd_io_load(hd_ctx *ctx, const char *path, hd_tensor **tensor, hd_io_list *list);
hd_status hd_io_save(hd_ctx *ctx, const char *path, const hd_tensor *tensor, const hd_io_list *l);

#endif
