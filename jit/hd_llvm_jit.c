/* Machine code: the host target, O2 through the new pass manager, object
 * emission, the disk cache, and linking with ORC's LLJIT.
 *
 * The object file is always made here (LLVMTargetMachineEmitToMemoryBuffer)
 * and handed to LLJIT as an object, so a cold compile and a cache hit link
 * the same way. Each executable owns one LLJIT instance (about half a
 * millisecond to make), freed with it; generated code reaches the runtime
 * through absolute symbols (hd_llvm_symbols), and anything else LLVM's
 * code generator may call (memset, ...) through the process's symbols. */
#include "hd_llvm.h"

#if HODU_HAVE_LLVM

#include <llvm-c/Analysis.h>
#include <llvm-c/Error.h>
#include <llvm-c/LLJIT.h>
#include <llvm-c/Orc.h>
#include <llvm-c/Target.h>
#include <llvm-c/Transforms/PassBuilder.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct hd_llvm_jit {
    LLVMOrcLLJITRef jit;
};

/* ---- the host, once per process ---- */

static pthread_once_t jit_once = PTHREAD_ONCE_INIT;
static int jit_ready;
static char *jit_triple, *jit_cpu;
/* the host's features, and the same without AVX-512 */
static char jit_features[8192], jit_features_no512[8192];

/* The host's features are its CPUID's: AVX-512 where it has it (32 vector
 * registers keep the polynomials of a fused transcendental chain out of the
 * stack: about 2x on such loops). Unlike the C build's -march=native this
 * is decided at run time, so valgrind, whose CPUID has no AVX-512, gets
 * AVX2 code. HODU_LLVM_AVX512=0 leaves it out, HODU_LLVM_VECTORS=0 the
 * explicit elementwise vectors (both read at every compile). */
static void jit_init(void) {
    if (LLVMInitializeNativeTarget() || LLVMInitializeNativeAsmPrinter()) return;
    char *f = LLVMGetHostCPUFeatures();
    jit_triple = LLVMGetDefaultTargetTriple();
    jit_cpu = LLVMGetHostCPUName();
    size_t n = f ? strlen(f) : sizeof jit_features;
    if (n < sizeof jit_features) {
        memcpy(jit_features, f, n + 1);
        memcpy(jit_features_no512, f, n + 1);
        for (char *p = jit_features_no512; (p = strstr(p, "+avx512")) != NULL; p++) *p = '-';
    }
    LLVMDisposeMessage(f);
    jit_ready = jit_triple && jit_cpu && n < sizeof jit_features;
}

hd_status hd_llvm_host_get(hd_ctx *ctx, hd_llvm_host *h) {
    pthread_once(&jit_once, jit_init);
    if (!jit_ready)
        return hd_error(ctx, HD_ERR_RUNTIME, "llvm: the native target is not available");
    const char *e = getenv("HODU_LLVM_AVX512");
    h->triple = jit_triple;
    h->cpu = jit_cpu;
    h->features = e && !strcmp(e, "0") ? jit_features_no512 : jit_features;
    h->f16c = strstr(h->features, "+f16c") != NULL;
    h->avx512 = strstr(h->features, "+avx512f") != NULL;
    h->avx2 = strstr(h->features, "+avx2") != NULL && strstr(h->features, "+fma") != NULL;
    e = getenv("HODU_LLVM_VECTORS"); /* 0: no explicit elementwise vectors */
    h->ew_vectors = !(e && !strcmp(e, "0"));
    return HD_OK;
}

/* ---- errors ---- */

static hd_status jit_error(hd_ctx *ctx, const char *what, LLVMErrorRef err) {
    char *m = LLVMGetErrorMessage(err);
    hd_status st = hd_error(ctx, HD_ERR_RUNTIME, "llvm: %s: %s", what, m ? m : "unknown error");
    LLVMDisposeErrorMessage(m);
    return st;
}

static hd_status jit_message_error(hd_ctx *ctx, const char *what, char *msg) {
    hd_status st = hd_error(ctx, HD_ERR_RUNTIME, "llvm: %s: %s", what, msg ? msg : "unknown error");
    LLVMDisposeMessage(msg);
    return st;
}

/* ---- logging ---- */

/* HODU_LOG=llvm (as generated) or llvm-opt (after O2): every function. */
static void jit_dump(LLVMModuleRef mod, const char *when) {
    fprintf(stderr, "llvm: ---- module %s ----\n", when);
    for (LLVMValueRef f = LLVMGetFirstFunction(mod); f; f = LLVMGetNextFunction(f)) {
        if (LLVMIsDeclaration(f)) continue;
        char *s = LLVMPrintValueToString(f);
        fprintf(stderr, "%s\n", s);
        LLVMDisposeMessage(s);
    }
}

/* ---- compiling ---- */

/* The large code model with static relocations: every address in the
 * machine code is a 64-bit absolute one (R_X86_64_64). The JIT's memory
 * manager maps the code and the read-only data (the constant pools) of a
 * module separately, anywhere in the address space; the small model's
 * 32-bit pc-relative references from code to constants reach only 2 GiB,
 * and a farther placement (after large mappings and holes: a device
 * arena, freed big buffers) truncated them silently: constants read from
 * the wrong memory or a fault. test_llvm checks the object's relocations. */
static hd_status jit_target(hd_ctx *ctx, const hd_llvm_host *h, LLVMTargetMachineRef *tm) {
    LLVMTargetRef target;
    char *msg = NULL;
    if (LLVMGetTargetFromTriple(h->triple, &target, &msg))
        return jit_message_error(ctx, "target", msg);
    *tm = LLVMCreateTargetMachine(target, h->triple, h->cpu, h->features, LLVMCodeGenLevelDefault,
                                  LLVMRelocStatic, LLVMCodeModelLarge);
    if (!*tm) return hd_error(ctx, HD_ERR_RUNTIME, "llvm: cannot make a target machine");
    return HD_OK;
}

static hd_status jit_optimize(hd_ctx *ctx, LLVMModuleRef mod, LLVMTargetMachineRef tm) {
    LLVMPassBuilderOptionsRef po = LLVMCreatePassBuilderOptions();
    LLVMPassBuilderOptionsSetLoopVectorization(po, 1);
    LLVMPassBuilderOptionsSetSLPVectorization(po, 1);
    LLVMPassBuilderOptionsSetLoopUnrolling(po, 0);
    LLVMErrorRef err = LLVMRunPasses(mod, "default<O2>", tm, po);
    LLVMDisposePassBuilderOptions(po);
    return err ? jit_error(ctx, "optimisation", err) : HD_OK;
}

/* The object file for mod: from the cache, or optimised and emitted (and
 * then cached). */
static hd_status jit_object(hd_ctx *ctx, const hd_llvm_host *h, LLVMModuleRef mod,
                            LLVMTargetMachineRef tm, LLVMMemoryBufferRef *obj, hd_llvm_timing *t) {
    char *ir = LLVMPrintModuleToString(mod);
    if (!ir) return hd_error(ctx, HD_ERR_MEMORY, "llvm: cannot print the module");
    hd_llvm_key key;
    hd_llvm_cache_key(ir, h, &key);
    LLVMDisposeMessage(ir);
    if (hd_log_on("llvm")) jit_dump(mod, "as generated");
    if (hd_llvm_cache_get(ctx, &key, obj)) return ctx->status;
    if (*obj) {
        t->cache_hit = 1;
        return HD_OK;
    }
    double t0 = hd_jit_now();
    if (jit_optimize(ctx, mod, tm)) return ctx->status;
    if (hd_log_on("llvm-opt")) jit_dump(mod, "after O2");
    double t1 = hd_jit_now();
    char *msg = NULL;
    if (LLVMTargetMachineEmitToMemoryBuffer(tm, mod, LLVMObjectFile, &msg, obj))
        return jit_message_error(ctx, "machine code", msg);
    t->opt = t1 - t0;
    t->obj = hd_jit_now() - t1;
    hd_llvm_cache_put(ctx, &key, LLVMGetBufferStart(*obj), LLVMGetBufferSize(*obj));
    return HD_OK;
}

/* ---- linking ---- */

static hd_status jit_symbols(hd_ctx *ctx, LLVMOrcLLJITRef jit) {
    int n;
    const hd_llvm_symbol *syms = hd_llvm_symbols(&n);
    LLVMJITCSymbolMapPair pairs[64];
    if (n > 64) n = 64;
    for (int i = 0; i < n; i++) {
        pairs[i].Name = LLVMOrcLLJITMangleAndIntern(jit, syms[i].name);
        pairs[i].Sym.Address = (LLVMOrcJITTargetAddress)(uintptr_t)syms[i].addr;
        pairs[i].Sym.Flags.GenericFlags =
            LLVMJITSymbolGenericFlagsExported | LLVMJITSymbolGenericFlagsCallable;
        pairs[i].Sym.Flags.TargetFlags = 0;
    }
    LLVMOrcJITDylibRef jd = LLVMOrcLLJITGetMainJITDylib(jit);
    LLVMErrorRef err = LLVMOrcJITDylibDefine(jd, LLVMOrcAbsoluteSymbols(pairs, (size_t)n));
    if (err) return jit_error(ctx, "runtime symbols", err);
    LLVMOrcDefinitionGeneratorRef gen;
    err = LLVMOrcCreateDynamicLibrarySearchGeneratorForProcess(
        &gen, LLVMOrcLLJITGetGlobalPrefix(jit), NULL, NULL);
    if (err) return jit_error(ctx, "process symbols", err);
    LLVMOrcJITDylibAddGenerator(jd, gen);
    return HD_OK;
}

static hd_status jit_link(hd_ctx *ctx, LLVMMemoryBufferRef obj, hd_llvm_jit *j, void **main) {
    LLVMOrcJITTargetMachineBuilderRef jtmb;
    LLVMErrorRef err = LLVMOrcJITTargetMachineBuilderDetectHost(&jtmb);
    if (err) {
        LLVMDisposeMemoryBuffer(obj);
        return jit_error(ctx, "host", err);
    }
    LLVMOrcLLJITBuilderRef jb = LLVMOrcCreateLLJITBuilder();
    LLVMOrcLLJITBuilderSetJITTargetMachineBuilder(jb, jtmb);
    if ((err = LLVMOrcCreateLLJIT(&j->jit, jb))) {
        LLVMDisposeMemoryBuffer(obj);
        return jit_error(ctx, "LLJIT", err);
    }
    if (jit_symbols(ctx, j->jit)) {
        LLVMDisposeMemoryBuffer(obj);
        return ctx->status;
    }
    if ((err = LLVMOrcLLJITAddObjectFile(j->jit, LLVMOrcLLJITGetMainJITDylib(j->jit), obj)))
        return jit_error(ctx, "adding the object", err);
    LLVMOrcExecutorAddress addr = 0;
    if ((err = LLVMOrcLLJITLookup(j->jit, &addr, "hd_main"))) return jit_error(ctx, "linking", err);
    *main = (void *)(uintptr_t)addr;
    return HD_OK;
}

hd_status hd_llvm_jit_build(hd_ctx *ctx, LLVMModuleRef mod, LLVMContextRef c, hd_llvm_jit **out,
                            void **main, hd_llvm_timing *t) {
    hd_llvm_host h;
    LLVMTargetMachineRef tm = NULL;
    LLVMMemoryBufferRef obj = NULL;
    hd_llvm_jit *j = NULL;
    char *msg = NULL;
    *out = NULL;
    memset(t, 0, sizeof *t);
    hd_status st = hd_llvm_host_get(ctx, &h);
    if (!st) st = jit_target(ctx, &h, &tm);
    if (!st) {
        LLVMSetTarget(mod, h.triple);
        LLVMTargetDataRef td = LLVMCreateTargetDataLayout(tm);
        LLVMSetModuleDataLayout(mod, td);
        LLVMDisposeTargetData(td);
        if (LLVMVerifyModule(mod, LLVMReturnStatusAction, &msg))
            st = jit_message_error(ctx, "the generated module does not verify", msg);
        else
            LLVMDisposeMessage(msg);
    }
    if (!st) st = jit_object(ctx, &h, mod, tm, &obj, t);
    LLVMDisposeModule(mod);
    LLVMContextDispose(c);
    if (tm) LLVMDisposeTargetMachine(tm);
    if (st) {
        if (obj) LLVMDisposeMemoryBuffer(obj);
        return st;
    }
    double t0 = hd_jit_now();
    if (!(j = hd_ctx_calloc(ctx, 1, sizeof *j))) {
        LLVMDisposeMemoryBuffer(obj);
        return ctx->status;
    }
    if (jit_link(ctx, obj, j, main)) {
        hd_llvm_jit_free(ctx, j);
        return ctx->status;
    }
    t->link = hd_jit_now() - t0;
    *out = j;
    return HD_OK;
}

void hd_llvm_jit_free(hd_ctx *ctx, hd_llvm_jit *j) {
    if (!j) return;
    if (j->jit) {
        LLVMErrorRef err = LLVMOrcDisposeLLJIT(j->jit);
        if (err) LLVMConsumeError(err);
    }
    hd_ctx_free(ctx, j, sizeof *j);
}

#endif /* HODU_HAVE_LLVM */
