/* What a VM does with files it did not expect: every reader refuses a
 * FIFO, a device or a directory at once, with a message naming the file
 * (a FIFO without a writer used to block for ever, /dev/zero to be read
 * until memory ran out); a VM without file access writes nothing to the
 * disk cache; the disk cache stays under its cap; a safetensors header
 * counts against the memory limit. An alarm turns a reader
 * that blocks into a failure instead of a hung test. */
#include "api_test.h"

#include <dirent.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

static char tmpdir[64];

static hodu_vm *vm_with_limit(size_t bytes) {
    hodu_options o;
    hodu_options_init(&o);
    o.memory_limit = bytes;
    return hodu_vm_new(&o);
}

/* A file name in the test's folder. */
static const char *in_tmp(const char *name, char *buf, size_t n) {
    snprintf(buf, n, "%s/%s", tmpdir, name);
    return buf;
}

/* name in the test folder made a FIFO (kind 0) or a link to /dev/zero
 * (kind 1) or a folder (kind 2). */
static const char *special(const char *name, int kind, char *buf, size_t n) {
    in_tmp(name, buf, n);
    int r = kind == 0   ? mkfifo(buf, 0600)
            : kind == 1 ? symlink("/dev/zero", buf)
                        : mkdir(buf, 0700);
    CHECK_MSG(r == 0, "cannot make %s", buf);
    return buf;
}

static const char *const kinds[] = {"a FIFO", "a character device", "a directory"};

/* load, read_csv and load_script on each kind: an I/O error at once that
 * names the file and says what it is. */
static void test_builtins(void) {
    hodu_vm *vm = hodu_vm_new(NULL);
    const char *const forms[] = {"let t = load(\"%s\")", "let t = load(\"%s\")",
                                 "let t = load(\"%s\")", "let t = read_csv(\"%s\")",
                                 "let s = load_script(\"%s\")"};
    const char *const exts[] = {"npy", "npz", "safetensors", "csv", "hoduscript"};
    for (int kind = 0; kind < 3; kind++) {
        for (int i = 0; i < 5; i++) {
            char name[64], path[256], prog[512];
            snprintf(name, sizeof name, "k%d_%d.%s", kind, i, exts[i]);
            special(name, kind, path, sizeof path);
            snprintf(prog, sizeof prog, forms[i], path);
            CHECK_ST(vm, hodu_eval(vm, prog, "files.hodu"), HODU_ERROR_IO);
            CHECK_ERR(vm, path);
            CHECK_ERR(vm, kinds[kind]);
        }
    }
    /* a regular file still loads */
    char path[256], prog[768];
    in_tmp("ok.npy", path, sizeof path);
    snprintf(prog, sizeof prog, "save(\"%s\", arange(0, 3))\nlet back = load(\"%s\")", path, path);
    CHECK_OK(vm, hodu_eval(vm, prog, NULL));
    hodu_vm_free(vm);
}

/* The host's own readers: hodu_eval_file, an import, hodu_script_load. */
static void test_host_readers(void) {
    hodu_vm *vm = hodu_vm_new(NULL);
    for (int kind = 0; kind < 3; kind++) {
        char name[64], path[256], prog[512];
        snprintf(name, sizeof name, "prog%d.hodu", kind);
        special(name, kind, path, sizeof path);
        CHECK_ST(vm, hodu_eval_file(vm, path), HODU_ERROR_IO);
        CHECK_ERR(vm, path);
        CHECK_ERR(vm, kinds[kind]);
        snprintf(prog, sizeof prog, "import \"%s\" as m", path);
        CHECK(hodu_eval(vm, prog, NULL) != HODU_OK); /* imports look for regular files only */
        CHECK_ERR(vm, path);
        snprintf(name, sizeof name, "s%d.hoduscript", kind);
        special(name, kind, path, sizeof path);
        CHECK(hodu_script_load(vm, path) == NULL);
        CHECK(hodu_error_status(vm) == HODU_ERROR_IO);
        CHECK_ERR(vm, path);
        CHECK_ERR(vm, kinds[kind]);
    }
    hodu_vm_free(vm);
}

/* Bytes and count of the cache entries (llvm-*, cuda-*) in dir. */
static long cache_files(const char *dir, long long *bytes) {
    DIR *d = opendir(dir);
    long n = 0;
    *bytes = 0;
    if (!d) return 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, "llvm-", 5) && strncmp(e->d_name, "cuda-", 5)) continue;
        char p[512];
        struct stat sb;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (lstat(p, &sb) == 0) *bytes += sb.st_size;
        n++;
    }
    closedir(d);
    return n;
}

/* Compile `count` different graphs, first number `first`. */
static void compile_some(hodu_vm *vm, int first, int count) {
    for (int i = first; i < first + count; i++) {
        char prog[256];
        snprintf(prog, sizeof prog,
                 "compiled fn f%d(x) { return relu(x * %d.5 + 1) }\nlet r%d = f%d(ones([16]))", i,
                 i, i, i);
        CHECK_OK(vm, hodu_eval(vm, prog, NULL));
    }
}

static void rm_cache(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        char p[512];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (e->d_name[0] != '.') unlink(p);
    }
    closedir(d);
}

static void test_disk_cache(void) {
    char cache[256];
    in_tmp("cache", cache, sizeof cache);
    setenv("HODU_CACHE_DIR", cache, 1);
    unsetenv("HODU_CACHE_MAX");
    long long bytes;
    /* without file access nothing reaches the disk */
    hodu_options o;
    memset(&o, 0, sizeof o);
    hodu_vm *vm = hodu_vm_new(&o);
    compile_some(vm, 0, 4);
    hodu_vm_free(vm);
    CHECK(cache_files(cache, &bytes) == 0);
    struct stat sb;
    CHECK(stat(cache, &sb) != 0); /* not even the folder */
    /* with it, entries are written (where the llvm compiler is built in) */
    vm = hodu_vm_new(NULL);
    compile_some(vm, 0, 4);
    hodu_vm_free(vm);
    long n = cache_files(cache, &bytes);
    if (n == 0) {
        printf("no disk cache entries (no llvm compiler): cap not tested\n");
    } else {
        /* a cap of about two entries keeps the newest ones */
        long long each = bytes / n;
        char cap[32];
        snprintf(cap, sizeof cap, "%lld", each * 5 / 2);
        setenv("HODU_CACHE_MAX", cap, 1);
        vm = hodu_vm_new(NULL);
        compile_some(vm, 10, 6);
        hodu_vm_free(vm);
        n = cache_files(cache, &bytes);
        CHECK_MSG(bytes <= each * 5 / 2 + each / 2 && n >= 1 && n <= 3,
                  "%ld entries, %lld bytes over a cap of %s", n, bytes, cap);
        /* a damaged entry that became a FIFO is skipped, not waited on */
        rm_cache(cache);
        setenv("HODU_CACHE_MAX", "1G", 1);
        vm = hodu_vm_new(NULL);
        compile_some(vm, 20, 1);
        hodu_vm_free(vm);
        DIR *d = opendir(cache);
        struct dirent *e;
        while (d && (e = readdir(d))) {
            if (strncmp(e->d_name, "llvm-", 5)) continue;
            char p[512];
            snprintf(p, sizeof p, "%s/%s", cache, e->d_name);
            unlink(p);
            CHECK(mkfifo(p, 0600) == 0);
        }
        if (d) closedir(d);
        vm = hodu_vm_new(NULL);
        compile_some(vm, 20, 1);
        hodu_vm_free(vm);
    }
    rm_cache(cache);
    rmdir(cache);
    unsetenv("HODU_CACHE_MAX");
}

/* A .safetensors file whose header lists n empty tensors (about 60 bytes
 * of JSON each). */
static void write_many_tensors(const char *path, long n) {
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f) return;
    char *hdr = malloc((size_t)n * 64 + 16), *p = hdr;
    p += sprintf(p, "{");
    for (long i = 0; i < n; i++)
        p += sprintf(p, "%s\"t%ld\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}",
                     i ? "," : "", i);
    p += sprintf(p, "}");
    unsigned long long len = (unsigned long long)(p - hdr);
    unsigned char le[8];
    for (int k = 0; k < 8; k++) le[k] = (unsigned char)(len >> (8 * k));
    CHECK(fwrite(le, 1, 8, f) == 8 && fwrite(hdr, 1, len, f) == len);
    fclose(f);
    free(hdr);
}

static long rss_kib(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

/* A 24 MB safetensors header under a 64 MiB limit: the header is parsed
 * through the VM's allocator, so the load fails with HODU_ERROR_MEMORY
 * instead of the process growing by a gigabyte outside the limit. */
static void test_safetensors_header(void) {
    char big[256], small[256], prog[600];
    in_tmp("big.safetensors", big, sizeof big);
    in_tmp("small.safetensors", small, sizeof small);
    write_many_tensors(big, 400000);
    write_many_tensors(small, 1000);
    hodu_vm *vm = vm_with_limit((size_t)64 << 20);
    long before = rss_kib();
    snprintf(prog, sizeof prog, "let d = load(\"%s\")", big);
    CHECK_ST(vm, hodu_eval(vm, prog, NULL), HODU_ERROR_MEMORY);
    long grown = rss_kib() - before;
    CHECK_MSG(grown < 160 * 1024, "the process grew by %ld KiB under a 64 MiB limit", grown);
    snprintf(prog, sizeof prog, "let d = load(\"%s\")\nlet n = len(d)", small);
    CHECK_OK(vm, hodu_eval(vm, prog, NULL));
    double n = 0;
    CHECK_OK(vm, hodu_get_global_number(vm, "n", &n));
    CHECK(n == 1000);
    hodu_vm_free(vm);
}

static void on_alarm(int sig) {
    (void)sig;
    static const char msg[] = "test_api_files: a reader blocked (alarm)\n";
    if (write(2, msg, sizeof msg - 1) < 0) _exit(3);
    _exit(2);
}

int main(void) {
    signal(SIGALRM, on_alarm);
    alarm(getenv("HODU_API_TEST_SLOW") ? 600 : 120);
    snprintf(tmpdir, sizeof tmpdir, "/tmp/hodu_api_files_XXXXXX");
    if (!mkdtemp(tmpdir)) return 1;
    test_builtins();
    test_host_readers();
    test_disk_cache();
    test_safetensors_header();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) printf("cannot remove %s\n", tmpdir);
    TEST_END();
}
