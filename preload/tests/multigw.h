/* multigw.h - shared by the two halves of multigw_test: the scenarios
 * (multigw_test.c, run preloaded) and the orchestrator (multigw_main.c). */
#ifndef MULTIGW_H
#define MULTIGW_H

#include "testio.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>

/* Runs one scenario in this (preloaded) process; the exit status. */
int mg_client_main(const char *scenario);

#endif
