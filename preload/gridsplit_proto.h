/*
 * gridsplit_proto.h - the LAN wire formats of docs/protocol.md sections 1-3, as C
 * structs. This header is the C half of the contract: crates/gridsplitd mirrors the
 * same layouts in Rust, so every size and offset is pinned by a static assertion and
 * any drift fails the build instead of corrupting a connection at run time.
 *
 * All multi-byte integers are in network byte order on the wire. The structs only
 * hold byte-sized or explicitly big-endian fields, so they have no padding and can
 * be sent with a single write of sizeof(struct).
 */
#ifndef GRIDSPLIT_PROTO_H
#define GRIDSPLIT_PROTO_H

#include <stddef.h>
#include <stdint.h>

/* Magics, as the four ASCII bytes that open each message. */
#define GS_MAGIC_REQUEST "GSq1" /* node -> local gateway (section 1) */
#define GS_MAGIC_REPLY "GSa1"   /* local gateway -> node (section 2) */
#define GS_MAGIC_ORIGIN "GSo1"  /* remote gateway -> destination node (section 3) */
#define GS_MAGIC_LEN 4

#define GS_PROTO_VERSION 1

/* Address family codes used on the wire (not AF_INET/AF_INET6, whose values are
 * platform-specific). */
#define GS_FAMILY_V4 4
#define GS_FAMILY_V6 6

/* Section 1: connect request, node -> local gateway, 24 bytes. */
struct gs_request {
    uint8_t magic[4];  /* "GSq1" */
    uint8_t version;   /* GS_PROTO_VERSION */
    uint8_t family;    /* GS_FAMILY_V4 or GS_FAMILY_V6 */
    uint16_t port_be;  /* destination port, network order */
    uint8_t addr[16];  /* destination address; IPv4 in the first 4 bytes, rest zero */
};

/* Section 2: connect reply, local gateway -> node, 8 bytes. */
struct gs_reply {
    uint8_t magic[4];    /* "GSa1" */
    uint8_t status;      /* enum gs_status */
    uint8_t reserved[3]; /* zero */
};

/* Section 3: origin header, remote gateway -> destination node, 24 bytes. Same
 * layout as the request; only the magic and meaning differ. */
struct gs_origin {
    uint8_t magic[4];  /* "GSo1" */
    uint8_t version;   /* GS_PROTO_VERSION */
    uint8_t family;    /* GS_FAMILY_V4 or GS_FAMILY_V6 */
    uint16_t port_be;  /* original source port, network order */
    uint8_t addr[16];  /* original source address */
};

/* Section 2 status values. The errno that libgridsplit reports for each is given by
 * status_errno() in handshake.c, following the table of protocol.md. */
enum gs_status {
    GS_STATUS_OK = 0,
    GS_STATUS_REFUSED = 1,     /* ECONNREFUSED */
    GS_STATUS_UNREACHABLE = 2, /* EHOSTUNREACH */
    GS_STATUS_FORBIDDEN = 3,   /* EACCES */
    GS_STATUS_TIMEOUT = 4,     /* ETIMEDOUT */
    GS_STATUS_NO_LINK = 5,     /* ENETUNREACH */
    GS_STATUS_BAD_REQUEST = 6, /* EPROTO */
};

_Static_assert(sizeof(struct gs_request) == 24, "GSq1 request must be 24 bytes");
_Static_assert(sizeof(struct gs_reply) == 8, "GSa1 reply must be 8 bytes");
_Static_assert(sizeof(struct gs_origin) == 24, "GSo1 origin header must be 24 bytes");
_Static_assert(offsetof(struct gs_request, version) == 4, "request.version at 4");
_Static_assert(offsetof(struct gs_request, family) == 5, "request.family at 5");
_Static_assert(offsetof(struct gs_request, port_be) == 6, "request.port at 6");
_Static_assert(offsetof(struct gs_request, addr) == 8, "request.addr at 8");
_Static_assert(offsetof(struct gs_reply, status) == 4, "reply.status at 4");
_Static_assert(offsetof(struct gs_reply, reserved) == 5, "reply.reserved at 5");
_Static_assert(offsetof(struct gs_origin, family) == 5, "origin.family at 5");
_Static_assert(offsetof(struct gs_origin, port_be) == 6, "origin.port at 6");
_Static_assert(offsetof(struct gs_origin, addr) == 8, "origin.addr at 8");

#endif /* GRIDSPLIT_PROTO_H */
