/* resolve: binds every name of a parsed chunk to a slot before it runs.
 *
 * Locals get frame slots, captured variables become cells reached through
 * the closure's upvalues, top-level `let`, `fn`, `class` and `import`
 * become module globals, and the rest must be builtins. Every unknown name,
 * assignment to an undeclared name, and misplaced break, continue or return
 * is reported (all of them, with spans) before anything executes. */
#ifndef HD_RESOLVE_H
#define HD_RESOLVE_H

#include "vm_internal.h"

/* Resolve p->program against mod's globals and vm's builtins. On success
 * the new globals are added to mod (filled with the "not yet defined"
 * marker). On failure nothing is added to mod, and *diags (arena memory of
 * p) holds every error. In REPL mode an unknown name inside a function body
 * declares a global, so that functions may refer to names defined by later
 * lines. Returns HD_OK, HD_ERR_SYNTAX or HD_ERR_MEMORY. */
hd_status hd_resolve(hd_vm *vm, hd_parse *p, hd_module *mod, int repl, hd_diag **diags,
                     int *ndiags);

#endif
