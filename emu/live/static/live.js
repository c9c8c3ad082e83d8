// emu live view: polls /api/state (emu/live/model.py's page model) and draws it as SVG.
// Plain JS, no libraries: the page must work offline in a teaching lab's VM.
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";
const WIDTH = 1000;
const HEIGHT = 480;
const POLL_MS = 250; // the server samples at 4 Hz; the page asks as often
const RETRY_MS = 1000; // the server is gone (the run ended): ask less often
const QUEUE_FULL_SCALE_BYTES = 128 * 1024; // the legend says so
const PORT_OFFSET_PX = 26; // from the switch's centre along the link
const UTIL_STOPS = [
  [0.0, [200, 206, 214]],
  [0.5, [91, 139, 208]],
  [1.0, [11, 46, 107]],
];

let drawnTopology = null; // the run id whose picture is in the SVG
let shownResults = null; // the results directory shown below the picture

function utilColour(util) {
  if (util === null || util === undefined) return "rgb(220,220,220)";
  const u = Math.max(0, Math.min(1, util));
  for (let i = 1; i < UTIL_STOPS.length; i++) {
    const [u1, c1] = UTIL_STOPS[i];
    const [u0, c0] = UTIL_STOPS[i - 1];
    if (u <= u1) {
      const f = (u - u0) / (u1 - u0);
      const c = c0.map((v, k) => Math.round(v + f * (c1[k] - v)));
      return `rgb(${c[0]},${c[1]},${c[2]})`;
    }
  }
  return "rgb(11,46,107)";
}

function el(name, attrs, parent) {
  const node = document.createElementNS(SVG_NS, name);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (parent) parent.appendChild(node);
  return node;
}

function place(node) {
  return [node.x * WIDTH, node.y * HEIGHT];
}

function drawTopology(doc) {
  const svg = document.getElementById("fabric");
  svg.replaceChildren();
  const pos = {};
  for (const n of doc.nodes) pos[n.name] = place(n);
  const links = el("g", { id: "links" }, svg);
  for (const l of doc.links) {
    const [x1, y1] = pos[l.a];
    const [x2, y2] = pos[l.b];
    const line = el("line", { class: "link", x1, y1, x2, y2, "data-link": l.id }, links);
    el("title", {}, line).textContent = l.id;
  }
  const nodes = el("g", { id: "nodes" }, svg);
  for (const n of doc.nodes) {
    const [x, y] = pos[n.name];
    const g = el("g", { class: "node", "data-node": n.name, "data-role": n.role }, nodes);
    if (n.kind === "switch") {
      el("rect", { x: x - 32, y: y - 13, width: 64, height: 26, rx: 4 }, g);
    } else {
      el("circle", { cx: x, cy: y, r: 14 }, g);
    }
    el("text", { x, y }, g).textContent = n.name;
  }
  // Ports last: on top of links and nodes. Each sits on its link, near its switch.
  const ports = el("g", { id: "ports-layer" }, svg);
  for (const p of doc.ports) {
    if (!p.peer || !pos[p.peer]) continue;
    const [sx, sy] = pos[p.switch];
    const [px, py] = pos[p.peer];
    const len = Math.hypot(px - sx, py - sy) || 1;
    const ux = (px - sx) / len;
    const uy = (py - sy) / len;
    const cx = sx + ux * PORT_OFFSET_PX;
    const cy = sy + uy * PORT_OFFSET_PX;
    const g = el("g", { class: "port-group", "data-port-group": p.id }, ports);
    el("rect", { class: "queue-bg", x: cx + 8, y: cy - 9, width: 4, height: 18 }, g);
    el("rect", { class: "queue", x: cx + 8, y: cy + 9, width: 4, height: 0, "data-queue": p.id }, g);
    const dot = el("circle", { class: "port", cx, cy, r: 6, "data-port": p.id, "data-state": "ok" }, g);
    el("title", {}, dot);
  }
  drawnTopology = doc.fabric ? doc.fabric.run_id : null;
}

function prios(list) {
  return list.length ? list.map((p) => "p" + p).join(" ") : "-";
}

function perPrio(counts) {
  const parts = [];
  counts.forEach((n, p) => {
    if (n) parts.push(`p${p}: ${n}`);
  });
  return parts.length ? parts.join(", ") : "0";
}

function sum(list) {
  return list.reduce((a, b) => a + b, 0);
}

function portTitle(p) {
  return (
    `${p.id} (${p.name}) -> ${p.peer}\n` +
    `tx ${(p.tx_bps / 1e6).toFixed(2)} Mb/s, rx ${(p.rx_bps / 1e6).toFixed(2)} Mb/s\n` +
    `queue ${p.queue_bytes} bytes\n` +
    `paused (PAUSE received): ${prios(p.paused_prios)}, ${Math.round(p.paused_share * 100)}% of the last interval\n` +
    `pausing its peer (PAUSE sent): ${prios(p.pausing_prios)}\n` +
    `PAUSE frames received ${perPrio(p.pause_rx_frames)}; sent ${perPrio(p.pause_tx_frames)}\n` +
    `ECN marks ${sum(p.ecn_marks)}, drops ${p.drops}`
  );
}

function updatePicture(doc) {
  const svg = document.getElementById("fabric");
  for (const l of doc.links) {
    const line = svg.querySelector(`[data-link="${l.id}"]`);
    if (!line) continue;
    const util = l.util === null ? 0 : l.util;
    line.setAttribute("stroke", utilColour(l.util));
    line.setAttribute("stroke-width", (2 + 8 * util).toFixed(1));
    line.setAttribute("data-util", l.util === null ? "" : l.util.toFixed(3));
    line.classList.toggle("down", !l.up);
    line.querySelector("title").textContent =
      `${l.id}: ${l.a} -> ${l.b} ${pct(l.util_ab)}, ${l.b} -> ${l.a} ${pct(l.util_ba)} ` +
      `of ${(l.rate_bps / 1e6).toFixed(0)} Mb/s`;
  }
  for (const p of doc.ports) {
    const dot = svg.querySelector(`[data-port="${p.id}"]`);
    if (!dot) continue;
    dot.setAttribute("data-state", p.state);
    // Paused and pausing at once: red with an amber ring.
    dot.classList.toggle("pausing-ring", p.state === "paused" && p.pausing_prios.length > 0);
    dot.querySelector("title").textContent = portTitle(p);
    const bar = svg.querySelector(`[data-queue="${p.id}"]`);
    const h = 18 * Math.min(1, p.queue_bytes / QUEUE_FULL_SCALE_BYTES);
    const y = Number(dot.getAttribute("cy")) + 9 - h;
    bar.setAttribute("height", h.toFixed(1));
    bar.setAttribute("y", y.toFixed(1));
  }
}

function pct(u) {
  return u === null ? "?" : `${Math.round(u * 100)}%`;
}

function updateTable(doc) {
  const body = document.querySelector("#ports tbody");
  const rows = doc.ports.map((p) => {
    const tr = document.createElement("tr");
    tr.dataset.port = p.id;
    tr.dataset.state = p.state;
    const cells = [
      `${p.id} ${p.name}`,
      p.peer || "",
      (p.tx_bps / 1e6).toFixed(2),
      (p.rx_bps / 1e6).toFixed(2),
      p.queue_bytes,
      prios(p.paused_prios),
      prios(p.pausing_prios),
      perPrio(p.pause_rx_frames),
      perPrio(p.pause_tx_frames),
      sum(p.ecn_marks),
      p.drops,
    ];
    for (const c of cells) {
      const td = document.createElement("td");
      td.textContent = c;
      tr.appendChild(td);
    }
    return tr;
  });
  body.replaceChildren(...rows);
}

function updateResults(doc) {
  const section = document.getElementById("results");
  if (!doc.results) {
    section.hidden = true;
    return;
  }
  if (shownResults === doc.results.dir) return;
  shownResults = doc.results.dir;
  document.getElementById("results-dir").textContent = doc.results.dir;
  const plots = document.getElementById("plots");
  plots.replaceChildren(
    ...doc.results.plots.map((p) => {
      const a = document.createElement("a");
      a.href = p.url;
      const img = document.createElement("img");
      img.src = p.url;
      img.alt = p.name;
      img.title = p.name;
      a.appendChild(img);
      return a;
    }),
  );
  document.getElementById("report").textContent = doc.results.report || "(no report.txt)";
  section.hidden = false;
}

function updateHeader(doc) {
  const fabric = doc.fabric;
  document.getElementById("fabric-name").textContent = fabric
    ? `${fabric.name} (${fabric.kind}), run ${fabric.run_id}`
    : "no fabric";
  const phase = document.getElementById("phase");
  phase.textContent = doc.phase;
  phase.dataset.phase = doc.phase;
  document.getElementById("message").textContent = doc.message || "";
  document.getElementById("updated").textContent = doc.sampled_at
    ? `sampled ${new Date(doc.sampled_at * 1000).toLocaleTimeString()} every ${doc.interval_s} s`
    : "";
}

function render(doc) {
  updateHeader(doc);
  const runId = doc.fabric ? doc.fabric.run_id : null;
  if (doc.nodes.length && runId !== drawnTopology) drawTopology(doc);
  if (doc.nodes.length) {
    updatePicture(doc);
    updateTable(doc);
  }
  updateResults(doc);
  document.body.dataset.rendered = String(Date.now()); // tests wait on a fresh render
}

async function poll() {
  let delay = POLL_MS;
  try {
    const answer = await fetch("/api/state", { cache: "no-store" });
    if (!answer.ok) throw new Error(`HTTP ${answer.status}`);
    render(await answer.json());
  } catch (err) {
    document.getElementById("message").textContent = `live view unreachable (${err.message})`;
    delay = RETRY_MS;
  }
  setTimeout(poll, delay);
}

poll();
