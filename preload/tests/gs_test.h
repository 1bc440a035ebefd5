/* gs_test.h - shared by the files of gs_test: the harness and runner (gs_test.c)
 * and the tests it runs, in three files by theme:
 *   gs_connect_test.c  the connect paths, blocking and non-blocking: redirection,
 *                      the accept side's view, refusals, timeouts, IPv6;
 *   gs_socket_test.c   sockets the library must leave alone or keep straight:
 *                      untouched connections, dup, stale fds, bad origin headers;
 *   gs_process_test.c  the process around them: threads, fork, a relay lost, a
 *                      missing or bad configuration.
 * Shared socket helpers and CHECK live in testio.h. */
#ifndef GS_TEST_H
#define GS_TEST_H

#include <stddef.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "testio.h"

#define HELLO_LEN 64      /* the site-b server's hello line */
#define NODE_IP "127.0.1.5" /* the address of this node of site a */

/* Set by gs_test.c's main before the tests run. */
extern int failures;                            /* CHECK's count, reset per test */
extern const char *test_dir;                    /* GS_TEST_DIR */
extern const char *gw_log;                      /* GS_GW_LOG, the fake gateway's log */
extern unsigned short port_accept, port_accept4; /* the site-b server's two listeners */

/* The harness (gs_test.c). */
void fmt_sa(const struct sockaddr *sa, char *buf, size_t len);
void local_name(int fd, char *buf, size_t len);
void peer_name(int fd, char *buf, size_t len);
void check_hello(int fd, const char *expect_src);
void check_echo(int fd, size_t n, unsigned seed);
int gw_count(const char *prefix);
int gw_has(const char *text);
int connect_b(const char *ip, unsigned short port);
int wait_pollout(int fd);
int so_error(int fd);
int listen_on(const char *ip, unsigned short *port);
char **make_env(const char *const *unset, const char *const *extra);
pid_t spawn_self(char *const argv[], char **env, const char *out_path, const char *err_path);

/* gs_connect_test.c */
void test_blocking_redirect(void);
void test_accept4_side(void);
void test_nonblocking_so_error(void);
void test_nonblocking_read_delayed(void);
void test_nonblocking_read_split_reply(void);
void test_nonblocking_write_first(void);
void test_refused_blocking(void);
void test_refused_nonblocking(void);
void test_connect_again_success(void);
void test_sndtimeo(void);
void test_ipv6_dual_stack(void);

/* gs_socket_test.c */
void test_untouched(void);
void test_dup(void);
void test_stale_fd(void);
void test_accept_bad_header(void);

/* gs_process_test.c */
void test_threads(void);
void test_fork(void);
void test_relay_lost_exits(void);
void test_bad_config(void);
void test_lan_timers_refused(void);
int timers_probe_main(const char *mode);

#endif
