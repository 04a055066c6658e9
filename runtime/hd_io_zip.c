/* hd_io_zip: .npz files, ZIP archives of .npy members (PKWARE APPNOTE 6.3).
 *
 * Reading trusts nothing: the end record, every central directory entry and
 * every local header are checked against each other and against the file
 * size before anything is allocated; members are stored or deflated, their
 * sizes bounded by what deflate can produce, and their CRC-32 verified.
 * ZIP64 archives are refused, but not the ZIP64 extra field numpy's savez
 * puts in every local header (it forces one, with the 32-bit sizes set to
 * 0xffffffff): its sizes must match the central directory's. */
#include "hd_io_impl.h"

#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#define HD_IO_ZIP_LOCAL    0x04034b50u
#define HD_IO_ZIP_CENTRAL  0x02014b50u
#define HD_IO_ZIP_END      0x06054b50u
#define HD_IO_ZIP64_LOCATE 0x07064b50u
#define HD_IO_ZIP_MAX32    0xfffffffeu /* larger values need ZIP64 */

typedef struct {
    const unsigned char *name;
    size_t name_len;
    unsigned flags, method;
    uint32_t crc;
    size_t csize, usize;
    size_t lho;  /* local header offset */
    size_t data; /* offset of the member's data */
} hd_io_zip_member;

typedef struct {
    hd_ctx *ctx;
    const char *name;
    const unsigned char *p;
    size_t n;
    size_t cd_off, cd_size, count;
    hd_io_zip_member *m;
} hd_io_zip;

/* zlib allocates through the context; the size lives before the block. */
static void *hd_io_zalloc(void *opaque, unsigned items, unsigned size) {
    size_t n;
    if (!hd_mul_overflow(items, size, &n) || n > SIZE_MAX - 16) return NULL;
    unsigned char *p = hd_ctx_alloc(opaque, n + 16);
    if (!p) return NULL;
    memcpy(p, &n, sizeof n);
    return p + 16;
}

static void hd_io_zfree(void *opaque, void *ptr) {
    if (!ptr) return;
    unsigned char *p = (unsigned char *)ptr - 16;
    size_t n;
    memcpy(&n, p, sizeof n);
    hd_ctx_free(opaque, p, n + 16);
}

static hd_status hd_io_zip_zip64(hd_io_zip *z) {
    return hd_error(z->ctx, HD_ERR_IO,
                    "%s: ZIP64 archives are not supported (members or archive over 4 GiB)",
                    z->name);
}

/* ---- reading ---- */

/* The end-of-central-directory record, searched backwards over the longest
 * possible comment; its comment must end exactly at the end of the file. */
static hd_status hd_io_zip_end(hd_io_zip *z) {
    const unsigned char *p = z->p;
    if (z->n < 22)
        return hd_error(z->ctx, HD_ERR_IO, "%s: not a ZIP archive (%zu bytes, no end record)",
                        z->name, z->n);
    size_t lo = z->n - 22 > 65535 ? z->n - 22 - 65535 : 0, e = z->n - 22;
    int found = 0;
    for (;; e--) {
        found = hd_io_rd32(p + e) == HD_IO_ZIP_END && e + 22 + hd_io_rd16(p + e + 20) == z->n;
        if (found || e == lo) break;
    }
    if (!found)
        return hd_error(z->ctx, HD_ERR_IO, "%s: not a ZIP archive (no end-of-directory record)",
                        z->name);
    unsigned n_disk = hd_io_rd16(p + e + 8), n_total = hd_io_rd16(p + e + 10);
    uint32_t cd_size = hd_io_rd32(p + e + 12), cd_off = hd_io_rd32(p + e + 16);
    if ((e >= 20 && hd_io_rd32(p + e - 20) == HD_IO_ZIP64_LOCATE) || n_total == 0xffff ||
        cd_size == 0xffffffffu || cd_off == 0xffffffffu)
        return hd_io_zip_zip64(z);
    if (hd_io_rd16(p + e + 4) || hd_io_rd16(p + e + 6) || n_disk != n_total)
        return hd_error(z->ctx, HD_ERR_IO, "%s: multi-disk ZIP archives are not supported",
                        z->name);
    if (cd_off > e || cd_size > e - cd_off)
        return hd_error(z->ctx, HD_ERR_IO,
                        "%s: central directory (%u bytes at offset %u) lies outside the "
                        "%zu bytes before the end record",
                        z->name, cd_size, cd_off, e);
    z->cd_off = cd_off;
    z->cd_size = cd_size;
    z->count = n_total;
    return HD_OK;
}

/* Entry i of the central directory at offset *q, which moves past it. */
static hd_status hd_io_zip_central(hd_io_zip *z, size_t i, size_t *q) {
    const unsigned char *p = z->p + *q;
    size_t left = z->cd_off + z->cd_size - *q;
    if (left < 46 || hd_io_rd32(p) != HD_IO_ZIP_CENTRAL)
        return hd_error(z->ctx, HD_ERR_IO, "%s: central directory entry %zu is damaged", z->name,
                        i);
    size_t nl = hd_io_rd16(p + 28), el = hd_io_rd16(p + 30), cl = hd_io_rd16(p + 32);
    if (46 + nl + el + cl > left)
        return hd_error(z->ctx, HD_ERR_IO, "%s: central directory entry %zu runs past its end",
                        z->name, i);
    hd_io_zip_member *m = &z->m[i];
    m->flags = hd_io_rd16(p + 8);
    m->method = hd_io_rd16(p + 10);
    m->crc = hd_io_rd32(p + 16);
    uint32_t cs = hd_io_rd32(p + 20), us = hd_io_rd32(p + 24), lho = hd_io_rd32(p + 42);
    if (cs == 0xffffffffu || us == 0xffffffffu || lho == 0xffffffffu) return hd_io_zip_zip64(z);
    m->csize = cs;
    m->usize = us;
    m->lho = lho;
    m->name = p + 46;
    m->name_len = nl;
    *q += 46 + nl + el + cl;
    return HD_OK;
}

/* The extra fields of a local header: 0 if malformed; the sizes of a ZIP64
 * field (id 1: uncompressed, then compressed size) into x[0], x[1]. */
static int hd_io_zip_extra(const unsigned char *p, size_t n, int *has64, uint64_t x[2]) {
    *has64 = 0;
    while (n) {
        if (n < 4) return 0;
        size_t id = hd_io_rd16(p), sz = hd_io_rd16(p + 2);
        if (sz > n - 4) return 0;
        if (id == 1 && sz >= 16) {
            *has64 = 1;
            x[0] = hd_io_rd64(p + 4);
            x[1] = hd_io_rd64(p + 12);
        }
        p += 4 + sz;
        n -= 4 + sz;
    }
    return 1;
}

/* A local size field agrees with the central size: equal, or 0xffffffff
 * standing for the ZIP64 extra field's value (numpy's savez writes these). */
static int hd_io_zip_size_ok(uint32_t field, int has64, uint64_t x, size_t want) {
    if (has64 && x != want) return 0;
    return field == want || (field == 0xffffffffu && has64);
}

/* Check member m's local header against its central entry; sets m->data. */
static hd_status hd_io_zip_local(hd_io_zip *z, hd_io_zip_member *m, const char *label) {
    if (m->lho > z->cd_off || z->cd_off - m->lho < 30)
        return hd_error(z->ctx, HD_ERR_IO, "%s: local header at offset %zu lies outside the file",
                        label, m->lho);
    const unsigned char *p = z->p + m->lho;
    size_t nl = hd_io_rd16(p + 26), el = hd_io_rd16(p + 28);
    unsigned lflags = hd_io_rd16(p + 6);
    int has64 = 0;
    uint64_t x[2] = {0, 0};
    if (hd_io_rd32(p) != HD_IO_ZIP_LOCAL || 30 + nl + el > z->cd_off - m->lho ||
        !hd_io_zip_extra(p + 30 + nl, el, &has64, x))
        return hd_error(z->ctx, HD_ERR_IO, "%s: local header at offset %zu is damaged", label,
                        m->lho);
    int sized = !(lflags & 8); /* else the sizes follow the data */
    if (nl != m->name_len || memcmp(p + 30, m->name, nl) != 0 || hd_io_rd16(p + 8) != m->method ||
        (sized && (hd_io_rd32(p + 14) != m->crc ||
                   !hd_io_zip_size_ok(hd_io_rd32(p + 18), has64, x[1], m->csize) ||
                   !hd_io_zip_size_ok(hd_io_rd32(p + 22), has64, x[0], m->usize))))
        return hd_error(z->ctx, HD_ERR_IO,
                        "%s: local header disagrees with the central directory (name, method, "
                        "CRC or sizes)",
                        label);
    m->data = m->lho + 30 + nl + el;
    if (m->csize > z->cd_off - m->data)
        return hd_error(z->ctx, HD_ERR_IO,
                        "%s: %zu bytes of data at offset %zu run past the central directory", label,
                        m->csize, m->data);
    return HD_OK;
}

/* Everything about member m that can be checked without decompressing. */
static hd_status hd_io_zip_check(hd_io_zip *z, hd_io_zip_member *m, const char *label) {
    if (m->flags & 0x41)
        return hd_error(z->ctx, HD_ERR_IO, "%s: encrypted members are not supported", label);
    if (m->method != 0 && m->method != 8)
        return hd_error(z->ctx, HD_ERR_IO,
                        "%s: compression method %u is not supported (only stored and deflate)",
                        label, m->method);
    if (m->name_len < 4 || memcmp(m->name + m->name_len - 4, ".npy", 4) != 0 ||
        memchr(m->name, 0, m->name_len))
        return hd_error(z->ctx, HD_ERR_IO, "%s: not a .npy member", label);
    if (m->method == 0 && m->csize != m->usize)
        return hd_error(z->ctx, HD_ERR_IO, "%s: stored member has sizes %zu and %zu", label,
                        m->csize, m->usize);
    if (m->method == 8 && (uint64_t)m->usize > (uint64_t)m->csize * 1032 + 64)
        return hd_error(z->ctx, HD_ERR_IO,
                        "%s: claims %zu bytes from %zu compressed, more than deflate can give",
                        label, m->usize, m->csize);
    return hd_io_zip_local(z, m, label);
}

static void hd_io_zip_label(const hd_io_zip *z, const hd_io_zip_member *m, char *buf, size_t cap) {
    char q[128];
    snprintf(buf, cap, "%s: member '%s'", z->name, hd_io_quote(m->name, m->name_len, q, sizeof q));
}

static int hd_io_zip_by_offset(const void *a, const void *b) {
    size_t x = ((const hd_io_zip_member *)a)->lho, y = ((const hd_io_zip_member *)b)->lho;
    return x < y ? -1 : x > y;
}

/* Read and check the directory; members end up sorted by offset, with no
 * two sharing bytes. */
static hd_status hd_io_zip_directory(hd_io_zip *z) {
    if (hd_io_zip_end(z)) return HD_ERR_IO;
    if (z->count == 0) return HD_OK;
    /* the entry count is a claim too: each entry takes 46 bytes at least */
    if (z->count > z->cd_size / 46)
        return hd_error(z->ctx, HD_ERR_IO,
                        "%s: central directory of %zu bytes cannot hold the %zu entries the end "
                        "record claims",
                        z->name, z->cd_size, z->count);
    z->m = hd_ctx_calloc(z->ctx, z->count, sizeof *z->m);
    if (!z->m) return HD_ERR_MEMORY;
    size_t q = z->cd_off;
    for (size_t i = 0; i < z->count; i++)
        if (hd_io_zip_central(z, i, &q)) return HD_ERR_IO;
    if (q != z->cd_off + z->cd_size)
        return hd_error(z->ctx, HD_ERR_IO,
                        "%s: central directory is %zu bytes, its %zu entries take %zu", z->name,
                        z->cd_size, z->count, q - z->cd_off);
    char label[256];
    for (size_t i = 0; i < z->count; i++) {
        hd_io_zip_label(z, &z->m[i], label, sizeof label);
        if (hd_io_zip_check(z, &z->m[i], label)) return HD_ERR_IO;
    }
    qsort(z->m, z->count, sizeof *z->m, hd_io_zip_by_offset);
    for (size_t i = 1; i < z->count; i++) {
        if (z->m[i - 1].data + z->m[i - 1].csize > z->m[i].lho) {
            hd_io_zip_label(z, &z->m[i], label, sizeof label);
            return hd_error(z->ctx, HD_ERR_IO, "%s: overlaps the member before it", label);
        }
    }
    return HD_OK;
}

/* Inflate m's raw deflate data into buf (m->usize bytes, room for one more
 * to notice a stream longer than the directory says). */
static hd_status hd_io_zip_inflate(hd_io_zip *z, const hd_io_zip_member *m, unsigned char *buf,
                                   const char *label) {
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    zs.zalloc = hd_io_zalloc;
    zs.zfree = hd_io_zfree;
    zs.opaque = z->ctx;
    if (inflateInit2(&zs, -15) != Z_OK) return HD_ERR_MEMORY;
    zs.next_in = (unsigned char *)(uintptr_t)(z->p + m->data);
    zs.avail_in = (uInt)m->csize;
    zs.next_out = buf;
    zs.avail_out = (uInt)(m->usize + 1);
    int rc = inflate(&zs, Z_FINISH);
    char msg[96];
    snprintf(msg, sizeof msg, "%s", zs.msg ? zs.msg : "no message");
    size_t got = zs.total_out, rest = zs.avail_in, room = zs.avail_out;
    inflateEnd(&zs);
    if (rc == Z_MEM_ERROR) return HD_ERR_MEMORY;
    if (rc == Z_DATA_ERROR)
        return hd_error(z->ctx, HD_ERR_IO, "%s: damaged deflate data (%s)", label, msg);
    if (rc == Z_STREAM_END && got == m->usize && rest == 0) return HD_OK;
    if (rc == Z_STREAM_END && rest)
        return hd_error(z->ctx, HD_ERR_IO, "%s: %zu bytes follow the end of the deflate stream",
                        label, rest);
    if (rc == Z_STREAM_END || room == 0)
        return hd_error(z->ctx, HD_ERR_IO, "%s: inflates to %s%zu bytes, the directory says %zu",
                        label, room == 0 ? "more than " : "", got, m->usize);
    return hd_error(z->ctx, HD_ERR_IO, "%s: deflate stream is truncated after %zu bytes", label,
                    m->csize);
}

static uint32_t hd_io_crc(const unsigned char *p, size_t n) {
    return (uint32_t)crc32_z(0, p, n);
}

/* Key of a member: its name without ".npy", in a new string. */
static char *hd_io_zip_key(hd_ctx *ctx, const hd_io_zip_member *m) {
    char *k = hd_ctx_alloc(ctx, m->name_len - 3);
    if (k) {
        memcpy(k, m->name, m->name_len - 4);
        k[m->name_len - 4] = 0;
    }
    return k;
}

static hd_status hd_io_zip_member_load(hd_io_zip *z, const hd_io_zip_member *m, hd_io_list *out) {
    char label[256];
    hd_io_zip_label(z, m, label, sizeof label);
    hd_ctx *ctx = z->ctx;
    const unsigned char *data = z->p + m->data;
    unsigned char *buf = NULL;
    char *key = NULL;
    hd_tensor *t = NULL;
    hd_status st = HD_ERR_MEMORY;
    if (m->method == 8) {
        buf = hd_ctx_alloc(ctx, m->usize + 1);
        if (!buf) goto done;
        if ((st = hd_io_zip_inflate(z, m, buf, label))) goto done;
        data = buf;
    }
    uint32_t crc = hd_io_crc(data, m->usize);
    if (crc != m->crc) {
        st = hd_error(ctx, HD_ERR_IO, "%s: CRC-32 is %08x, the directory says %08x", label, crc,
                      m->crc);
        goto done;
    }
    if ((st = hd_io_load_npy_buffer(ctx, label, data, m->usize, &t))) goto done;
    st = HD_ERR_MEMORY;
    if (!(key = hd_io_zip_key(ctx, m))) goto done;
    st = hd_io_list_add(ctx, out, key, t);
done:
    hd_tensor_unref(t);
    if (key) hd_ctx_free(ctx, key, m->name_len - 3);
    if (buf) hd_ctx_free(ctx, buf, m->usize + 1);
    return st;
}

hd_status hd_io_load_npz_buffer(hd_ctx *ctx, const char *name, const void *buf, size_t n,
                                hd_io_list *out) {
    hd_io_list_init(out);
    hd_io_zip z = {ctx, name, buf, n, 0, 0, 0, NULL};
    hd_status st = hd_io_zip_directory(&z);
    for (size_t i = 0; !st && i < z.count; i++) st = hd_io_zip_member_load(&z, &z.m[i], out);
    if (!st) st = hd_io_list_check_unique(ctx, name, out, HD_ERR_IO); /* a damaged file */
    if (z.m) hd_ctx_free(ctx, z.m, z.count * sizeof *z.m);
    if (st) hd_io_list_free(ctx, out);
    return st;
}

hd_status hd_io_load_npz(hd_ctx *ctx, const char *path, hd_io_list *out) {
    hd_io_list_init(out);
    hd_io_file f;
    if (hd_io_file_open(ctx, path, &f)) return ctx->status;
    hd_status st = hd_io_load_npz_buffer(ctx, path, f.data, f.n, out);
    hd_io_file_close(ctx, &f);
    return st;
}

/* ---- writing ---- */

/* One member being written: its CRC and sizes, and the deflate state. */
typedef struct {
    int compress;
    z_stream zs;
    uint32_t crc;
    uint64_t usize, csize;
} hd_io_zip_out;

/* What the central directory needs of a written member. */
typedef struct {
    unsigned method, flags;
    uint32_t crc, csize, usize, lho;
} hd_io_zip_rec;

static hd_status hd_io_zip_deflate(hd_io_out *o, hd_io_zip_out *w, const unsigned char *p, size_t n,
                                   int flush) {
    unsigned char buf[16384];
    do {
        uInt take = n > (1u << 30) ? (1u << 30) : (uInt)n;
        w->zs.next_in = (unsigned char *)(uintptr_t)p;
        w->zs.avail_in = take;
        if (take) p += take; /* the final flush passes NULL, and NULL + 0 is undefined */
        n -= take;
        int fl = n ? Z_NO_FLUSH : flush;
        for (;;) {
            w->zs.next_out = buf;
            w->zs.avail_out = sizeof buf;
            int rc = deflate(&w->zs, fl);
            if (rc == Z_STREAM_ERROR)
                return hd_error(o->ctx, HD_ERR_RUNTIME, "%s: deflate failed", o->name);
            size_t have = sizeof buf - w->zs.avail_out;
            w->csize += have;
            if (hd_io_out_raw(o, buf, have)) return o->ctx->status;
            if (fl == Z_FINISH ? rc == Z_STREAM_END : w->zs.avail_out != 0) break;
        }
    } while (n);
    return HD_OK;
}

static hd_status hd_io_zip_filter(hd_io_out *o, const void *p, size_t n) {
    hd_io_zip_out *w = o->filter_ud;
    w->crc = (uint32_t)crc32_z(w->crc, p, n);
    w->usize += n;
    if (w->compress) return hd_io_zip_deflate(o, w, p, n, Z_NO_FLUSH);
    w->csize += n;
    return hd_io_out_raw(o, p, n);
}

/* The 30-byte local header; the CRC and sizes are patched in afterwards. */
static void hd_io_zip_local_header(unsigned char *h, const hd_io_zip_rec *r, size_t nl) {
    memset(h, 0, 30);
    hd_io_wr32(h, HD_IO_ZIP_LOCAL);
    hd_io_wr16(h + 4, 20);
    hd_io_wr16(h + 6, r->flags);
    hd_io_wr16(h + 8, r->method);
    hd_io_wr16(h + 12, 0x21); /* 1980-01-01: output does not depend on the clock */
    hd_io_wr32(h + 14, r->crc);
    hd_io_wr32(h + 18, r->csize);
    hd_io_wr32(h + 22, r->usize);
    hd_io_wr16(h + 26, (uint32_t)nl);
}

/* The body of member "<key>.npy": t as .npy, through CRC and deflate. */
static hd_status hd_io_zip_body(hd_io_out *o, const hd_tensor *t, hd_io_zip_rec *r) {
    hd_io_zip_out w;
    memset(&w, 0, sizeof w);
    w.compress = r->method == 8;
    w.zs.zalloc = hd_io_zalloc;
    w.zs.zfree = hd_io_zfree;
    w.zs.opaque = o->ctx;
    if (w.compress &&
        deflateInit2(&w.zs, Z_DEFAULT_COMPRESSION, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY) != Z_OK)
        return HD_ERR_MEMORY;
    o->filter = hd_io_zip_filter;
    o->filter_ud = &w;
    hd_status st = hd_io_npy_write(o, t);
    o->filter = NULL;
    o->filter_ud = NULL;
    if (!st && w.compress) st = hd_io_zip_deflate(o, &w, NULL, 0, Z_FINISH);
    if (w.compress) deflateEnd(&w.zs);
    if (st) return st;
    if (w.usize > HD_IO_ZIP_MAX32 || w.csize > HD_IO_ZIP_MAX32)
        return hd_error(o->ctx, HD_ERR_IO,
                        "%s: a member over 4 GiB needs ZIP64, which is not written; use "
                        ".safetensors",
                        o->name);
    r->crc = w.crc;
    r->usize = (uint32_t)w.usize;
    r->csize = (uint32_t)w.csize;
    return HD_OK;
}

static int hd_io_zip_utf8(const char *s) {
    for (; *s; s++)
        if ((unsigned char)*s >= 0x80) return 1;
    return 0;
}

static hd_status hd_io_zip_too_big(hd_io_out *o) {
    return hd_error(o->ctx, HD_ERR_IO,
                    "%s: archive over 4 GiB or 65535 members needs ZIP64, which is not written; "
                    "use .safetensors",
                    o->name);
}

static hd_status hd_io_zip_member_save(hd_io_out *o, const hd_io_entry *e, int compress,
                                       hd_io_zip_rec *r) {
    size_t nl = strlen(e->name) + 4;
    unsigned char h[30];
    if (o->pos > HD_IO_ZIP_MAX32) return hd_io_zip_too_big(o);
    memset(r, 0, sizeof *r);
    r->method = compress ? 8 : 0;
    r->flags = hd_io_zip_utf8(e->name) ? 0x800 : 0;
    r->lho = (uint32_t)o->pos;
    hd_io_zip_local_header(h, r, nl);
    if (hd_io_out_raw(o, h, 30) || hd_io_out_raw(o, e->name, nl - 4) ||
        hd_io_out_raw(o, ".npy", 4) || hd_io_zip_body(o, e->tensor, r))
        return o->ctx->status;
    hd_io_zip_local_header(h, r, nl);
    return hd_io_out_patch(o, r->lho + 14, h + 14, 12);
}

static hd_status hd_io_zip_central_save(hd_io_out *o, const hd_io_entry *e,
                                        const hd_io_zip_rec *r) {
    unsigned char h[46];
    size_t nl = strlen(e->name) + 4;
    memset(h, 0, sizeof h);
    hd_io_wr32(h, HD_IO_ZIP_CENTRAL);
    hd_io_wr16(h + 4, (3 << 8) | 20); /* made by: Unix, version 2.0 */
    hd_io_wr16(h + 6, 20);
    hd_io_wr16(h + 8, r->flags);
    hd_io_wr16(h + 10, r->method);
    hd_io_wr16(h + 14, 0x21);
    hd_io_wr32(h + 16, r->crc);
    hd_io_wr32(h + 20, r->csize);
    hd_io_wr32(h + 24, r->usize);
    hd_io_wr16(h + 28, (uint32_t)nl);
    hd_io_wr32(h + 38, 0644u << 16);
    hd_io_wr32(h + 42, r->lho);
    if (hd_io_out_raw(o, h, 46) || hd_io_out_raw(o, e->name, nl - 4) || hd_io_out_raw(o, ".npy", 4))
        return o->ctx->status;
    return HD_OK;
}

typedef struct {
    const hd_io_list *l;
    int compress;
} hd_io_npz_job;

static hd_status hd_io_npz_emit(hd_io_out *o, const void *arg) {
    const hd_io_npz_job *job = arg;
    const hd_io_list *l = job->l;
    hd_ctx *ctx = o->ctx;
    hd_io_zip_rec *recs = hd_ctx_calloc(ctx, l->count ? l->count : 1, sizeof *recs);
    if (!recs) return HD_ERR_MEMORY;
    hd_status st = HD_OK;
    for (size_t i = 0; !st && i < l->count; i++)
        st = hd_io_zip_member_save(o, &l->entries[i], job->compress, &recs[i]);
    uint64_t cd_off = o->pos;
    for (size_t i = 0; !st && i < l->count; i++)
        st = hd_io_zip_central_save(o, &l->entries[i], &recs[i]);
    hd_ctx_free(ctx, recs, (l->count ? l->count : 1) * sizeof *recs);
    if (st) return st;
    if (o->pos > HD_IO_ZIP_MAX32) return hd_io_zip_too_big(o);
    unsigned char end[22];
    memset(end, 0, sizeof end);
    hd_io_wr32(end, HD_IO_ZIP_END);
    hd_io_wr16(end + 8, (uint32_t)l->count);
    hd_io_wr16(end + 10, (uint32_t)l->count);
    hd_io_wr32(end + 12, (uint32_t)(o->pos - cd_off));
    hd_io_wr32(end + 16, (uint32_t)cd_off);
    return hd_io_out_raw(o, end, sizeof end);
}

/* Whether a key is safe as a ZIP member's path: tools that extract the
 * archive write it as a file, so no absolute path, no "." or ".." part, no
 * empty part, no backslash (a separator on Windows) and no control
 * characters. "a/b" stays allowed (NumPy's savez makes the same member). */
static int hd_io_npz_safe_name(const char *s) {
    if (!*s || *s == '/') return 0;
    for (const char *p = s; *p; p++)
        if (*p == '\\' || (unsigned char)*p < 0x20 || *p == 0x7f) return 0;
    for (const char *p = s; *p;) {
        size_t n = strcspn(p, "/");
        if (n == 0 || (n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.')) return 0;
        p += n;
        if (*p == '/' && !*++p) return 0; /* a trailing slash: an empty last part */
    }
    return 1;
}

/* Everything that can be refused before a byte is written. */
static hd_status hd_io_npz_check(hd_ctx *ctx, const char *name, const hd_io_list *l) {
    if (l->count > 65534)
        return hd_error(ctx, HD_ERR_ARGUMENT, "%s: %zu tensors; .npz holds at most 65534", name,
                        l->count);
    char label[256], q[128];
    for (size_t i = 0; i < l->count; i++) {
        const hd_io_entry *e = &l->entries[i];
        snprintf(label, sizeof label, "%s: '%s'", name,
                 hd_io_quote(e->name, strlen(e->name), q, sizeof q));
        if (strlen(e->name) > 65535 - 4)
            return hd_error(ctx, HD_ERR_ARGUMENT, "%s: name too long for a ZIP member", label);
        if (!hd_io_npz_safe_name(e->name))
            return hd_error(ctx, HD_ERR_ARGUMENT,
                            "%s: not a safe ZIP member name (empty, absolute, with a '.' or '..' "
                            "part, a backslash or a control character)",
                            label);
        if (hd_io_npy_check(ctx, label, e->tensor)) return ctx->status;
    }
    return hd_io_list_check_unique(ctx, name, l, HD_ERR_ARGUMENT);
}

hd_status hd_io_save_npz_bytes(hd_ctx *ctx, const char *name, const hd_io_list *l, int compress,
                               hd_io_bytes *out) {
    if (hd_io_npz_check(ctx, name, l)) return ctx->status;
    hd_io_npz_job job = {l, compress};
    return hd_io_save_to_bytes(ctx, name, hd_io_npz_emit, &job, out);
}

hd_status hd_io_save_npz(hd_ctx *ctx, const char *path, const hd_io_list *l, int compress) {
    if (hd_io_npz_check(ctx, path, l)) return ctx->status;
    hd_io_npz_job job = {l, compress};
    return hd_io_save_to_path(ctx, path, hd_io_npz_emit, &job);
}
