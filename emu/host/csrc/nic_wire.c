/* Bytes of a NIC's frames: the ICRC, RoCEv2 frames built and read, PFC.
 *
 * emu/proto/roce.py and emu/proto/pfc.py are the specification; the
 * differential test compares the frames byte for byte. The ICRC (IBA Annex
 * A17.3.3) is zlib's CRC-32 over 8 bytes of 0xFF, the IPv4 and UDP headers and
 * the BTH with their variant fields masked to ones, and the payload; it is
 * stored least significant byte first.
 */
#include "nic.h"

#include <string.h>

static uint32_t crc_table[8][256];

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc_table[t][i] = crc_table[0][crc_table[t - 1][i] & 0xFF] ^ (crc_table[t - 1][i] >> 8);
}

/* zlib.crc32(p[:n], crc): chaining two calls equals one over both. Slice-by-8. */
uint32_t nic_crc32(uint32_t crc, const uint8_t *p, size_t n)
{
    if (!crc_table[0][1])
        crc_init();
    uint32_t c = ~crc;
    while (n >= 8) {
        uint32_t lo = c ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                           (uint32_t)p[3] << 24);
        uint32_t hi = (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16 |
                      (uint32_t)p[7] << 24;
        c = crc_table[7][lo & 0xFF] ^ crc_table[6][(lo >> 8) & 0xFF] ^
            crc_table[5][(lo >> 16) & 0xFF] ^ crc_table[4][lo >> 24] ^ crc_table[3][hi & 0xFF] ^
            crc_table[2][(hi >> 8) & 0xFF] ^ crc_table[1][(hi >> 16) & 0xFF] ^
            crc_table[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--)
        c = crc_table[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
    return ~c;
}

static inline void put16(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

static inline void put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static inline uint32_t get16(const uint8_t *p) { return (uint32_t)p[0] << 8 | p[1]; }

static inline uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

int nic_hdr_init(nic_hdr *h, const uint8_t *raw, size_t len, int becn)
{
    if (len != NIC_HDR_BYTES || raw[12] != 0x08 || raw[13] != 0x00 || raw[14] != 0x45)
        return -1;
    memcpy(h->hdr, raw, NIC_HDR_BYTES);
    memset(h->hdr + 16, 0, 2);  /* IPv4 total length */
    memset(h->hdr + 24, 0, 2);  /* IPv4 checksum */
    memset(h->hdr + 38, 0, 4);  /* UDP length and checksum */
    uint32_t sum = 0;
    for (int i = 14; i < 34; i += 2)
        sum += get16(h->hdr + i);
    h->ip_sum = sum;
    memcpy(h->masked, h->hdr + 14, 28);
    h->masked[1] = 0xFF;                          /* tos */
    h->masked[8] = 0xFF;                          /* ttl */
    h->masked[10] = h->masked[11] = 0xFF;         /* IPv4 checksum */
    h->masked[26] = h->masked[27] = 0xFF;         /* UDP checksum */
    h->becn = becn ? 1u << 30 : 0;
    return 0;
}

static inline uint32_t fold(uint32_t s)
{
    s = (s & 0xFFFF) + (s >> 16);
    return (s & 0xFFFF) + (s >> 16);
}

/* Header and BTH into out[0:54]; returns the ICRC over their masked form. */
static uint32_t pack_head(const nic_hdr *h, uint8_t *out, size_t udp_len, int opcode, int flags,
                          uint32_t dqpn, uint32_t apsn)
{
    uint32_t ip_len = (uint32_t)udp_len + 20;
    memcpy(out, h->hdr, NIC_HDR_BYTES);
    put16(out + 16, ip_len);
    put16(out + 24, ~fold(h->ip_sum + ip_len) & 0xFFFF);
    put16(out + 38, (uint32_t)udp_len);
    uint8_t *bth = out + NIC_HDR_BYTES;
    bth[0] = (uint8_t)opcode;
    bth[1] = (uint8_t)flags;
    bth[2] = bth[3] = 0xFF;  /* the default P_Key */
    put32(bth + 4, h->becn | dqpn);
    put32(bth + 8, apsn);
    uint8_t m[8 + 28 + 12];
    memset(m, 0xFF, 8);
    memcpy(m + 8, h->masked, 28);
    put16(m + 8 + 2, ip_len);
    put16(m + 8 + 24, (uint32_t)udp_len);
    memcpy(m + 36, bth, 12);
    put32(m + 36 + 4, 0xFF000000u | dqpn);
    return nic_crc32(0, m, sizeof m);
}

size_t nic_build(const nic_hdr *h, uint8_t *out, int opcode, uint32_t dqpn, uint32_t apsn,
                 const uint8_t *ext, size_t ext_len, const uint8_t *payload, size_t payload_len)
{
    size_t pad = (4 - (payload_len & 3)) & 3;
    size_t body = ext_len + payload_len + pad;
    uint8_t *b = out + NIC_HDR_BYTES + 12;
    if (ext_len)
        memcpy(b, ext, ext_len);
    if (payload)
        memcpy(b + ext_len, payload, payload_len);
    else
        for (size_t i = 0; i < payload_len; i++)
            b[ext_len + i] = (uint8_t)i;  /* roce._PAYLOAD: 0, 1, ..., 255, 0, ... */
    memset(b + ext_len + payload_len, 0, pad);
    uint32_t crc = pack_head(h, out, 8 + 12 + 4 + body, opcode, (int)(pad << 4), dqpn, apsn);
    crc = nic_crc32(crc, b, body);
    uint8_t *ic = b + body;
    ic[0] = (uint8_t)crc;
    ic[1] = (uint8_t)(crc >> 8);
    ic[2] = (uint8_t)(crc >> 16);
    ic[3] = (uint8_t)(crc >> 24);
    return NIC_HDR_BYTES + 12 + body + 4;
}

size_t nic_build_ack(const nic_hdr *h, uint8_t *out, uint32_t dqpn, uint32_t psn, uint32_t msn,
                     int syndrome)
{
    uint8_t aeth[4];
    put32(aeth, (uint32_t)(syndrome & 0xFF) << 24 | (msn & PSN_MASK));
    uint8_t *b = out + NIC_HDR_BYTES + 12;
    memcpy(b, aeth, 4);
    uint32_t crc = pack_head(h, out, 8 + 12 + 4 + 4, OP_ACK, 0, dqpn, psn & PSN_MASK);
    crc = nic_crc32(crc, aeth, 4);
    b[4] = (uint8_t)crc;
    b[5] = (uint8_t)(crc >> 8);
    b[6] = (uint8_t)(crc >> 16);
    b[7] = (uint8_t)(crc >> 24);
    return NIC_HDR_BYTES + 12 + 8;
}

size_t nic_build_cnp(const nic_hdr *h, uint8_t *out, uint32_t dqpn)
{
    uint8_t *b = out + NIC_HDR_BYTES + 12;
    memset(b, 0, 16);
    uint32_t crc = pack_head(h, out, 8 + 12 + 16 + 4, OP_CNP, 0, dqpn, 0);
    crc = nic_crc32(crc, b, 16);
    b[16] = (uint8_t)crc;
    b[17] = (uint8_t)(crc >> 8);
    b[18] = (uint8_t)(crc >> 16);
    b[19] = (uint8_t)(crc >> 24);
    return NIC_HDR_BYTES + 12 + 20;
}

static size_t ext_bytes(int opcode)
{
    switch (opcode) {
    case OP_WRITE_FIRST:
    case OP_WRITE_ONLY:
        return 16;
    case OP_ACK:
        return 4;
    case OP_CNP:
        return 16;
    default:
        return 0;
    }
}

/* roce.parse without the ICRC check: the same frames accepted, the same fields. */
int nic_parse_roce(const uint8_t *f, size_t n, nic_roce *r)
{
    if (n < 14 + 20 + 8 + 12 + 4 || f[12] != 0x08 || f[13] != 0x00)
        return 0;
    int vihl = f[14];
    size_t ihl = (size_t)(vihl & 0x0F) * 4;
    size_t ip_len = get16(f + 16);
    if (vihl >> 4 != 4 || ihl < 20 || f[23] != 17 || (get16(f + 20) & 0x3FFF))
        return 0;
    size_t u = 14 + ihl;
    if (14 + ip_len > n || ip_len < ihl + 8 + 12 + 4)
        return 0;
    if (get16(f + u + 2) != 4791 || get16(f + u + 4) != ip_len - ihl)
        return 0;
    size_t b = u + 8;
    r->opcode = f[b];
    int flags = f[b + 1];
    uint32_t dqpn = get32(f + b + 4), apsn = get32(f + b + 8);
    size_t ext = ext_bytes(r->opcode);
    size_t end = 14 + ip_len - 4;
    size_t x = b + 12;
    size_t pad = (size_t)(flags >> 4 & 3);
    if (end < x + ext + pad)
        return 0;
    r->payload_len = end - x - ext - pad;
    r->payload_offset = x + ext;
    r->syndrome = -1;
    r->msn = 0;
    if (r->opcode == OP_ACK) {
        uint32_t aeth = get32(f + x);
        r->syndrome = (int)(aeth >> 24);
        r->msn = aeth & PSN_MASK;
    }
    r->dest_qp = dqpn & PSN_MASK;
    r->psn = apsn & PSN_MASK;
    r->ack_req = (int)(apsn >> 31);
    r->ecn = f[15] & 3;
    return 1;
}

int nic_is_mac_control(const uint8_t *f, size_t n)
{
    return n >= 14 && f[12] == 0x88 && f[13] == 0x08;
}

int nic_parse_pfc(const uint8_t *f, size_t n, int *vector, uint16_t quanta[8])
{
    if (n < 18 || !nic_is_mac_control(f, n))
        return 0;
    uint32_t opcode = get16(f + 14);
    if (opcode == 0x0001) {  /* 802.3x PAUSE: every priority */
        *vector = 0xFF;
        for (int p = 0; p < 8; p++)
            quanta[p] = (uint16_t)get16(f + 16);
        return 1;
    }
    if (opcode != 0x0101 || n < 34)
        return 0;
    *vector = (int)(get16(f + 16) & 0xFF);
    for (int p = 0; p < 8; p++)
        quanta[p] = (uint16_t)get16(f + 18 + 2 * p);
    return 1;
}

size_t nic_build_pfc(const uint8_t tmpl[NIC_PFC_FRAME_BYTES], uint8_t *out, int prio,
                     uint16_t q)
{
    memcpy(out, tmpl, NIC_PFC_FRAME_BYTES);
    put16(out + 14, 0x0101);
    put16(out + 16, 1u << prio);
    memset(out + 18, 0, 16);
    put16(out + 18 + 2 * prio, q);
    return NIC_PFC_FRAME_BYTES;
}
