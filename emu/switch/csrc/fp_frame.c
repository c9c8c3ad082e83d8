/* Bytes of a frame: the exact-match key, PFC parsing, and the rewrites the
 * C path carries out, with checksums kept as emu/switch/rewrite.py keeps them.
 *
 * Reference: emu/switch/parse.py (cache_key), emu/proto/pfc.py (parse),
 * emu/proto/roce.py (is_rocev2), emu/switch/rewrite.py (_patch, _set_tclass,
 * set_ipv4_addr, _set_l4_port, _set_ttl_at, dec_nw_ttl). Every read is
 * checked against `len` first; a frame that lacks the header an action needs
 * is left unchanged, as the Python model leaves it.
 */
#include "fp.h"

#include <string.h>

static inline unsigned rd16(const uint8_t *p) { return (unsigned)p[0] << 8 | p[1]; }
static inline void wr16(uint8_t *p, unsigned v) { p[0] = (uint8_t)(v >> 8); p[1] = (uint8_t)v; }

/* parse.cache_key: untagged IPv4 without options, TCP or UDP, not a later
 * fragment, at least 38 bytes: (in_port, frame[:16], frame[20:24],
 * frame[26:38]). Returns 0 for any other frame (the slow path keys those). */
int
fp_fast_key(const uint8_t *f, size_t len, uint32_t in_port, uint8_t *key)
{
    if (len < 38 || f[12] != 0x08 || f[13] != 0x00 || f[14] != 0x45)
        return 0;
    if (f[23] != 6 && f[23] != 17)
        return 0;
    if ((f[20] & 0x1F) || f[21])
        return 0;
    if (in_port > 0xFFFF)
        return 0;
    key[0] = (uint8_t)(in_port >> 8);
    key[1] = (uint8_t)in_port;
    memcpy(key + 2, f, 16);
    memcpy(key + 18, f + 20, 4);
    memcpy(key + 22, f + 26, 12);
    return 1;
}

/* datapath._enqueue's one look at the IPv4 TOS: untagged, or behind one
 * 802.1Q tag. -1: not IPv4 as that look sees it. */
int
fp_tos(const uint8_t *f, size_t len)
{
    if (len >= 14 && f[12] == 0x08 && f[13] == 0x00 && len > 15)
        return f[15];
    if (len >= 18 && f[12] == 0x81 && f[13] == 0x00 && f[16] == 0x08 && f[17] == 0x00 && len > 19)
        return f[19];
    return -1;
}

/* pfc.parse: 1 with the class-enable vector and quanta, 0 when not a PFC or
 * 802.3x PAUSE frame (the caller counts an rx error). */
int
fp_pfc_parse(const uint8_t *f, size_t len, uint8_t *vector, uint16_t *quanta)
{
    if (len < 18 || f[12] != 0x88 || f[13] != 0x08)
        return 0;
    unsigned opcode = rd16(f + 14);
    if (opcode == 0x0001) {
        unsigned q = rd16(f + 16);
        *vector = 0xFF;
        for (int i = 0; i < FP_PRIOS; i++)
            quanta[i] = (uint16_t)q;
        return 1;
    }
    if (opcode != 0x0101 || len < 34)
        return 0;
    *vector = (uint8_t)(rd16(f + 16) & 0xFF);
    for (int i = 0; i < FP_PRIOS; i++)
        quanta[i] = (uint16_t)rd16(f + 18 + 2 * i);
    return 1;
}

/* roce.is_rocev2: IPv4/UDP to port 4791. */
int
fp_is_rocev2(const uint8_t *f, size_t len)
{
    if (len < 42 || f[12] != 0x08 || f[13] != 0x00 || f[23] != 17)
        return 0;
    size_t u = 14 + (size_t)(f[14] & 0x0F) * 4;
    if (len < u + 8)
        return 0;
    return rd16(f + u + 2) == 4791;
}

/* ----- rewrite.py's IPv4 helpers ------------------------------------------- */

static size_t
l3_offset(const uint8_t *f, size_t len)
{
    if (len >= 18) {
        unsigned t = rd16(f + 12);
        if (t == 0x8100 || t == 0x88A8)
            return 18;
    }
    return 14;
}

/* rewrite._ipv4_offset: offset of a complete IPv4 header or 0 (never valid). */
static size_t
ipv4_offset(const uint8_t *f, size_t len)
{
    size_t off = l3_offset(f, len);
    if (len < off + 20 || rd16(f + off - 2) != 0x0800)
        return 0;
    if (f[off] >> 4 != 4 || len < off + (size_t)(f[off] & 0x0F) * 4)
        return 0;
    return off;
}

/* RFC 1624 eqn. 3 over whole 16-bit words (rewrite._csum_adjust). */
static unsigned
csum_adjust(unsigned csum, const uint8_t *old, const uint8_t *new, size_t n)
{
    uint32_t s = ~csum & 0xFFFF;
    for (size_t i = 0; i + 1 < n; i += 2)
        s += (~rd16(old + i) & 0xFFFF) + rd16(new + i);
    while (s >> 16)
        s = (s & 0xFFFF) + (s >> 16);
    return ~s & 0xFFFF;
}

enum { L4_NONE, L4_PSEUDO, L4_HEADER };

/* rewrite._patch for IPv4 frames: write `n` bytes at `pos`, fix the IPv4
 * header checksum (ip_header) and the TCP/UDP checksum (l4). */
static void
patch(uint8_t *f, size_t len, size_t pos, const uint8_t *new, size_t n, int ip_header, int l4)
{
    if (pos + n > len)
        return;
    size_t ip = ipv4_offset(f, len);
    int proto = -1;
    size_t l4_off = 0;
    if (ip) {
        proto = f[ip + 9];
        if (!(rd16(f + ip + 6) & 0x1FFF))
            l4_off = ip + (size_t)(f[ip] & 0x0F) * 4;
    }
    size_t start = pos & ~(size_t)1, end = (pos + n + 1) & ~(size_t)1;
    uint8_t old_w[24], new_w[24];
    if (end > len || end - start > sizeof old_w) {
        /* An odd write at the frame's last byte: its word ends beyond the
         * frame. The fields the C path sets never end there. */
        memcpy(f + pos, new, n);
        return;
    }
    memcpy(old_w, f + start, end - start);
    memcpy(f + pos, new, n);
    memcpy(new_w, f + start, end - start);
    if (!memcmp(old_w, new_w, end - start))
        return;
    if (ip_header && ip) {
        size_t at = ip + 10;
        wr16(f + at, csum_adjust(rd16(f + at), old_w, new_w, end - start));
    }
    if (l4 != L4_NONE && l4_off) {
        size_t at;
        if (proto == 6)
            at = l4_off + 16;
        else if (proto == 17)
            at = l4_off + 6;
        else
            return;  /* the C path keys only TCP and UDP */
        if (at + 2 > len)
            return;
        unsigned csum = rd16(f + at);
        if (proto == 17 && csum == 0)
            return;  /* no checksum was computed: none to keep right */
        csum = csum_adjust(csum, old_w, new_w, end - start);
        if (proto == 17 && csum == 0)
            csum = 0xFFFF;
        wr16(f + at, csum);
    }
}

/* rewrite._set_tclass for IPv4 (the C path's frames are IPv4). */
static void
set_tclass(uint8_t *f, size_t len, int dscp, int ecn)
{
    size_t off = ipv4_offset(f, len);
    if (!off)
        return;
    uint8_t tos = f[off + 1];
    if (dscp >= 0)
        tos = (uint8_t)((dscp & 0x3F) << 2 | (tos & 3));
    if (ecn >= 0)
        tos = (uint8_t)((tos & 0xFC) | (ecn & 3));
    patch(f, len, off + 1, &tos, 1, 1, L4_NONE);
}

void
fp_set_ip_ecn(uint8_t *f, size_t len, int ecn)
{
    set_tclass(f, len, -1, ecn);
}

static void
set_ttl(uint8_t *f, size_t len, unsigned ttl)
{
    size_t off = ipv4_offset(f, len);
    if (!off)
        return;
    uint8_t b = (uint8_t)ttl;
    patch(f, len, off + 8, &b, 1, 1, L4_NONE);
}

int
fp_dec_nw_ttl(uint8_t *f, size_t len)
{
    size_t off = ipv4_offset(f, len);
    if (!off)
        return 1;  /* no IP: unchanged, not dropped */
    unsigned ttl = f[off + 8];
    if (ttl <= 1)
        return 0;
    set_ttl(f, len, ttl - 1);
    return 1;
}

static void
set_l4_port(uint8_t *f, size_t len, int proto, int dst, unsigned port)
{
    size_t ip = ipv4_offset(f, len);
    if (!ip || f[ip + 9] != proto || (rd16(f + ip + 6) & 0x1FFF))
        return;
    size_t l4 = ip + (size_t)(f[ip] & 0x0F) * 4;
    uint8_t b[2];
    wr16(b, port & 0xFFFF);
    patch(f, len, l4 + (dst ? 2 : 0), b, 2, 0, L4_HEADER);
}

int
fp_set_supported(int field)
{
    return field >= 0 && field < FP_F_COUNT;
}

/* One set-field (or set_nw_ttl) of the supported kinds; returns the length. */
size_t
fp_apply_set(uint8_t *f, size_t len, int field, uint64_t v)
{
    uint8_t b[6];
    switch (field) {
    case FP_F_ETH_DST:
    case FP_F_ETH_SRC:
        if (len < 12)
            return len;
        for (int i = 0; i < 6; i++)
            b[i] = (uint8_t)(v >> (8 * (5 - i)));
        memcpy(f + (field == FP_F_ETH_DST ? 0 : 6), b, 6);
        return len;
    case FP_F_IPV4_SRC:
    case FP_F_IPV4_DST: {
        size_t off = ipv4_offset(f, len);
        if (!off)
            return len;
        for (int i = 0; i < 4; i++)
            b[i] = (uint8_t)(v >> (8 * (3 - i)));
        patch(f, len, off + (field == FP_F_IPV4_DST ? 16 : 12), b, 4, 1, L4_PSEUDO);
        return len;
    }
    case FP_F_IP_DSCP:
        set_tclass(f, len, (int)(v & 0x3F), -1);
        return len;
    case FP_F_IP_ECN:
        set_tclass(f, len, -1, (int)(v & 3));
        return len;
    case FP_F_TCP_SRC:
    case FP_F_TCP_DST:
        set_l4_port(f, len, 6, field == FP_F_TCP_DST, (unsigned)v);
        return len;
    case FP_F_UDP_SRC:
    case FP_F_UDP_DST:
        set_l4_port(f, len, 17, field == FP_F_UDP_DST, (unsigned)v);
        return len;
    case FP_F_NW_TTL:
        set_ttl(f, len, (unsigned)(v & 0xFF));
        return len;
    default:
        return len;
    }
}
