/* The emulated NVRTC: CUDA C compiled as host C++ (emu_device.h force-
 * included) into a shared object, the module image that emu.c loads. */
#define _GNU_SOURCE
#include "emu_int.h"

#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

typedef struct emu_prog {
    char *src;
    char *log;
    char *image;
    size_t image_n;
} emu_prog;

EMU_EXPORT const char *nvrtcGetErrorString(int r) {
    return r == NVRTC_SUCCESS                ? "NVRTC_SUCCESS"
           : r == NVRTC_ERROR_COMPILATION    ? "NVRTC_ERROR_COMPILATION"
           : r == NVRTC_ERROR_OUT_OF_MEMORY  ? "NVRTC_ERROR_OUT_OF_MEMORY"
           : r == NVRTC_ERROR_INVALID_OPTION ? "NVRTC_ERROR_INVALID_OPTION"
                                             : "NVRTC_ERROR";
}

/* Not a real NVRTC: the version keys the disk cache, so it is 99 and a
 * hash of what shapes the images (the device header, this format). */
EMU_EXPORT int nvrtcVersion(int *major, int *minor) {
    static int hash = -1;
    if (hash < 0) {
        size_t n = 0;
        char *h = emu_file_read(HD_EMU_HEADER, &n);
        uint32_t x = 2166136261u ^ 5u; /* 5: the entry points' format */
        for (size_t i = 0; h && i < n; i++) x = (x ^ (unsigned char)h[i]) * 16777619u;
        free(h);
        hash = (int)(x & 0x7fffffff);
    }
    *major = 99;
    *minor = hash;
    return NVRTC_SUCCESS;
}

EMU_EXPORT int nvrtcCreateProgram(emu_prog **out, const char *src, const char *name, int nh,
                                  const char *const *h, const char *const *hn) {
    (void)name, (void)h, (void)hn;
    if (nh != 0) return 3; /* no headers: the generated code uses none */
    emu_prog *p = calloc(1, sizeof *p);
    if (!p || !(p->src = strdup(src))) {
        free(p);
        return NVRTC_ERROR_OUT_OF_MEMORY;
    }
    *out = p;
    return NVRTC_SUCCESS;
}

EMU_EXPORT int nvrtcDestroyProgram(emu_prog **p) {
    if (!p || !*p) return 4;
    free((*p)->src);
    free((*p)->log);
    free((*p)->image);
    free(*p);
    *p = NULL;
    return NVRTC_SUCCESS;
}

static int mem_has(const char *p, size_t n, const char *what) {
    size_t w = strlen(what);
    for (size_t i = 0; i + w <= n; i++)
        if (!memcmp(p + i, what, w)) return 1;
    return 0;
}

/* The names that reach a barrier: __syncthreads and every __device__
 * function whose text mentions one of them (found until none is added;
 * a name that only looks like one costs speed, not results). */
typedef struct sync_names {
    char name[64][64];
    int n;
} sync_names;

static int sync_mentions(const sync_names *sn, const char *p, size_t n) {
    for (int i = 0; i < sn->n; i++)
        if (mem_has(p, n, sn->name[i])) return 1;
    return 0;
}

/* The function name after a __device__ at p (the identifier before the
 * first '('), in out. */
static int sync_def_name(const char *p, char *out, size_t cap) {
    const char *paren = strchr(p, '(');
    if (!paren) return 0;
    const char *e = paren;
    while (e > p && e[-1] == ' ') e--;
    const char *b = e;
    while (b > p && (b[-1] == '_' || (b[-1] >= 'a' && b[-1] <= 'z') ||
                     (b[-1] >= 'A' && b[-1] <= 'Z') || (b[-1] >= '0' && b[-1] <= '9')))
        b--;
    if (b == e || (size_t)(e - b) >= cap) return 0;
    memcpy(out, b, (size_t)(e - b));
    out[e - b] = 0;
    return 1;
}

/* The text from p to the next definition. */
static size_t sync_def_len(const char *p) {
    const char *d = strstr(p + 1, "__device__"), *g = strstr(p + 1, "__global__");
    const char *e = !d ? g : !g ? d : d < g ? d : g;
    return e ? (size_t)(e - p) : strlen(p);
}

static void sync_collect(const char *src, sync_names *sn) {
    snprintf(sn->name[0], sizeof sn->name[0], "__syncthreads");
    sn->n = 1;
    for (int added = 1; added && sn->n < 64;) {
        added = 0;
        for (const char *p = strstr(src, "__device__"); p && sn->n < 64;
             p = strstr(p + 1, "__device__")) {
            char name[64];
            size_t len = sync_def_len(p);
            if (!sync_def_name(p, name, sizeof name) || !sync_mentions(sn, p, len)) continue;
            int known = 0;
            for (int i = 0; i < sn->n; i++) known |= !strcmp(sn->name[i], name);
            if (known) continue;
            snprintf(sn->name[sn->n++], sizeof sn->name[0], "%s", name);
            added = 1;
        }
    }
}

/* The source with the entry points of every kernel appended. */
static char *prog_source(const char *src) {
    size_t n = strlen(src), cap = n * 2 + 4096, len = 0;
    char *out = malloc(cap);
    if (!out) return NULL;
    memcpy(out, src, n);
    len = n;
    sync_names sn;
    sync_collect(src, &sn);
    for (const char *p = strstr(src, "__global__"); p; p = strstr(p + 1, "__global__")) {
        const char *q = p + 10;
        while (*q == ' ') q++;
        if (!strncmp(q, "void", 4)) q += 4;
        while (*q == ' ') q++;
        if (!strncmp(q, "__launch_bounds__", 17)) {
            q = strchr(q, ')');
            if (!q) break;
            q++;
            while (*q == ' ') q++;
        }
        size_t k = 0;
        while (q[k] == '_' || (q[k] >= 'a' && q[k] <= 'z') || (q[k] >= 'A' && q[k] <= 'Z') ||
               (q[k] >= '0' && q[k] <= '9'))
            k++;
        if (!k) continue;
        int sync = sync_mentions(&sn, q, sync_def_len(q));
        if (len + 5 * k + 400 > cap) {
            cap = cap * 2 + 5 * k + 400;
            char *m = realloc(out, cap);
            if (!m) {
                free(out);
                return NULL;
            }
            out = m;
        }
        len +=
            (size_t)snprintf(out + len, cap - len,
                             "\nextern \"C\" int %.*s__emu_sig(size_t *s, unsigned short *p, "
                             "int cap) { return hd_emu_sig(%.*s, s, p, cap); }\n"
                             "extern \"C\" void %.*s__emu_run(void **a) { hd_emu_run(%.*s, a); }\n"
                             "extern \"C\" const int %.*s__emu_sync = %d;\n",
                             (int)k, q, (int)k, q, (int)k, q, (int)k, q, (int)k, q, sync);
    }
    out[len] = 0;
    return out;
}

/* cxx -o so src, its messages into log; the exit status. */
static int prog_cxx(const char *src, const char *so, const char *log) {
    const char *cxx = getenv("HODU_EMU_CXX");
    const char *opt = getenv("HODU_EMU_OPT");
    char *argv[] = {(char *)(cxx && *cxx ? cxx : HD_EMU_CXX),
                    "-std=c++17",
                    (char *)(opt && *opt ? opt : "-O1"),
                    "-fPIC",
                    "-ffp-contract=off", /* as NVRTC's --fmad=false */
                    "-shared",
                    "-w",
                    "-I",
                    HD_EMU_INCLUDE,
                    "-include",
                    HD_EMU_HEADER,
                    "-x",
                    "c++",
                    (char *)src,
                    "-o",
                    (char *)so,
                    NULL};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    pid_t pid;
    int r = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (r) return -1;
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* Modules are compiled as host C++ with -ffp-contract=off: the model of
 * NVRTC's --fmad=false only, so a compile without it is refused (on a GPU
 * contracted FMAs would round otherwise than the emulator does). */
static int prog_fmad_off(int nopt, const char *const *opts) {
    for (int i = 0; i < nopt; i++)
        if (opts[i] && !strcmp(opts[i], "--fmad=false")) return 1;
    return 0;
}

EMU_EXPORT int nvrtcCompileProgram(emu_prog *p, int nopt, const char *const *opts) {
    if (!prog_fmad_off(nopt, opts)) {
        free(p->log);
        p->log = strdup("cuda emulator: compile with --fmad=false (the only rounding it models)");
        return NVRTC_ERROR_INVALID_OPTION;
    }
    char *text = prog_source(p->src);
    char src[4096], so[4200], log[4200];
    if (!text || !emu_temp_write(src, sizeof src, ".cu", text, strlen(text))) {
        free(text);
        return NVRTC_ERROR_OUT_OF_MEMORY;
    }
    free(text);
    snprintf(so, sizeof so, "%s.so", src);
    snprintf(log, sizeof log, "%s.log", src);
    int r = prog_cxx(src, so, log);
    size_t n = 0;
    free(p->log);
    p->log = emu_file_read(log, &n);
    char *img = r == 0 ? emu_file_read(so, &n) : NULL;
    if (getenv("HODU_EMU_KEEP")) /* debugging: keep the source */
        fprintf(stderr, "cuda emulator: %s\n", src);
    else
        unlink(src);
    unlink(so);
    unlink(log);
    if (!img) return NVRTC_ERROR_COMPILATION;
    p->image = malloc(n + 16);
    if (!p->image) {
        free(img);
        return NVRTC_ERROR_OUT_OF_MEMORY;
    }
    uint64_t n64 = n;
    memcpy(p->image, IMAGE_MAGIC, 8);
    memcpy(p->image + 8, &n64, 8);
    memcpy(p->image + 16, img, n);
    p->image_n = n + 16;
    free(img);
    return NVRTC_SUCCESS;
}

EMU_EXPORT int nvrtcGetProgramLogSize(emu_prog *p, size_t *n) {
    *n = (p->log ? strlen(p->log) : 0) + 1;
    return NVRTC_SUCCESS;
}
EMU_EXPORT int nvrtcGetProgramLog(emu_prog *p, char *out) {
    strcpy(out, p->log ? p->log : "");
    return NVRTC_SUCCESS;
}
EMU_EXPORT int nvrtcGetCUBINSize(emu_prog *p, size_t *n) {
    *n = p->image_n;
    return NVRTC_SUCCESS;
}
EMU_EXPORT int nvrtcGetCUBIN(emu_prog *p, char *out) {
    if (!p->image) return 4;
    memcpy(out, p->image, p->image_n);
    return NVRTC_SUCCESS;
}
