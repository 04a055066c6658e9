/* golden_expect: the expectations a golden program writes in its comments
 * (see golden_runner.c for the headers), read by golden_runner and by
 * oomfail. */
#ifndef GOLDEN_EXPECT_H
#define GOLDEN_EXPECT_H

#include <stddef.h>

#define GOLDEN_MAX_ITEMS 512

typedef struct golden_expect {
    char *out[GOLDEN_MAX_ITEMS]; /* expect: */
    int nout;
    char *err[GOLDEN_MAX_ITEMS]; /* expect error: */
    int nerr;
    char *at[GOLDEN_MAX_ITEMS]; /* expect error at: */
    int nat;
    char *log[GOLDEN_MAX_ITEMS]; /* expect stderr: */
    int nlog;
    char *args[64];
    int nargs;
    char *env[16];
    int nenv;
    int check; /* mode: check */
} golden_expect;

/* A whole file, NUL-terminated (*len without it; len may be NULL); NULL if
 * it cannot be read. The caller frees it. */
char *golden_read_all(const char *path, size_t *len);
/* Fill e from a program's source (exits 2 when memory runs out). */
void golden_expect_parse(golden_expect *e, const char *src);
void golden_expect_free(golden_expect *e);
/* Set one `# env: NAME=VALUE` entry, with $DIR replaced by dir. */
void golden_put_env(const char *spec, const char *dir);
/* The folder of file ("." when it has none) into dir. */
void golden_dir_of(const char *file, char *dir, size_t n);
/* Whether error text err (the program run as `file`) satisfies the
 * `expect error` and `expect error at` entries. */
int golden_error_matches(const golden_expect *e, const char *file, const char *err);
/* Whether standard output out is the expected output, line for line
 * (trailing blanks aside); with prefix set, whether it is the start of it
 * (its last line may be cut short). */
int golden_output_matches(const golden_expect *e, const char *out, int prefix);

#endif
