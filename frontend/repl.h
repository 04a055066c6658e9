/* repl: the interactive prompt of `hodu` on a terminal (libedit). */
#ifndef HD_REPL_H
#define HD_REPL_H

#include "vm.h"

/* Read, evaluate and print until :quit or end of input (Ctrl-D). Prompts
 * `>>> ` and `... ` while a statement is still open; history in
 * ~/.hodu_history; tab completion of globals and `x.` members; Ctrl-C
 * cancels the line or interrupts a running evaluation. Returns the exit
 * status for main. */
int hd_repl_run(hd_vm *vm);

#endif
