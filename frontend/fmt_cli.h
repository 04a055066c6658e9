/* fmt_cli: the `hodu fmt` subcommand (rewrites source into its canonical
 * layout; lang/fmt.h has the rules). */
#ifndef HD_FMT_CLI_H
#define HD_FMT_CLI_H

/* argv: the words after "fmt". Returns the exit status. */
int hd_fmt_main(int argc, char **argv);

#endif
