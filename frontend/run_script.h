/* run_script: the `hodu run-script` subcommand (runs a .hoduscript). */
#ifndef HD_RUN_SCRIPT_H
#define HD_RUN_SCRIPT_H

/* argv: the words after "run-script". Returns the exit status. */
int hd_run_script_main(int argc, char **argv);

#endif
