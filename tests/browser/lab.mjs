// The browser test: JupyterLab in headless Chromium runs two notebook cells on the placelab
// kernel and the rendered page is checked. See README.md here; tests/jupyter/browser.rs runs it.
//
//   node tests/browser/lab.mjs [--kernel-prefix P] [--kernel-name N] [--stock-kernel]
//
// 1. starts `jupyter lab` (from target/browser-venv) on 127.0.0.1 at a free port with a random
//    token, its notebook folder target/browser-notebooks/ and its config, data, runtime,
//    settings and workspace folders fresh under target/browser-lab/;
// 2. writes placelab.ipynb there, whose kernelspec is the placelab kernel, whose first cell
//    moves a 1000x1000 tensor to a simulated cuda:0 and whose second is `:plot transfers`;
// 3. opens it in Debian's Chromium through playwright-core, clicks into the first cell and
//    presses Shift+Enter, as a person would;
// 4. waits for the tensor card (.placelab-tensor) and the memory strip (.placelab-memory) and
//    asserts on what they show: the card's device and shape, the strip's cuda:0 row;
// 5. runs the second cell the same way, waits for its plot (image/svg+xml) and asserts on the
//    SVG's caption, axis labels and the cpu → cuda:0 series;
// 6. (placelab only) types `Tensor::ze` in the third cell and presses Tab: the completer must
//    offer `zeros` (the kernel's rust-analyzer process answers); then, on `Tensor::zeros`,
//    Shift+Tab: the tooltip must show its documentation;
// 7. keeps target/browser-artefacts/{notebook.png, output.png, output.html, plot.png,
//    readme.png, jupyter.log} (failure.png instead when it fails; readme.png, the README's
//    picture, only when every check passed) and shuts the server and its kernels down.
// Exits 0 when every check passed, 1 with the reason otherwise.
//
// --kernel-prefix P   the prefix given to `placelab install-kernel --prefix P`: the server
//                     looks for kernels in P/share/jupyter (JUPYTER_PATH).
// --kernel-name N     the kernelspec's name (default placelab).
// --stock-kernel      the venv's python3 kernel and Python cells that display HTML with the
//                     same classes and text, and an SVG with the plot's texts: checks the
//                     browser mechanics without placelab.
// Environment: PLACELAB_BROWSER_CELL_TIMEOUT_S (default 900: a cold PLACELAB_CACHE compiles
// the engine in the first cell), PLACELAB_CHROMIUM (default /usr/bin/chromium),
// PLACELAB_CACHE (default target/placelab-session-cache, the cache tests/jupyter.rs and
// tests/repl.rs share).

import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { createRequire } from 'node:module';

const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.resolve(here, '..', '..');
const target = path.join(repo, 'target');
const venv = path.join(target, 'browser-venv');
const nodeDir = path.join(target, 'browser-node');
const notebookDir = path.join(target, 'browser-notebooks');
const labDir = path.join(target, 'browser-lab');
const artefacts = path.join(target, 'browser-artefacts');
const chromiumPath = process.env.PLACELAB_CHROMIUM || '/usr/bin/chromium';
const cellTimeoutMs = 1000 * Number(process.env.PLACELAB_BROWSER_CELL_TIMEOUT_S || 900);
const started = Date.now();

// ---------------------------------------------------------------- arguments
const args = { kernelPrefix: null, kernelName: 'placelab', stock: false };
for (let i = 2; i < process.argv.length; i++) {
  const a = process.argv[i];
  if (a === '--kernel-prefix') args.kernelPrefix = path.resolve(process.argv[++i]);
  else if (a === '--kernel-name') args.kernelName = process.argv[++i];
  else if (a === '--stock-kernel') args.stock = true;
  else {
    console.error(`lab.mjs: unknown argument ${a} (see the top of ${path.relative(repo, fileURLToPath(import.meta.url))})`);
    process.exit(2);
  }
}
if (args.stock) args.kernelName = 'python3';

function log(msg) {
  console.log(`[lab.mjs ${((Date.now() - started) / 1000).toFixed(1).padStart(6)}s] ${msg}`);
}
class TestFailure extends Error {}
function fail(msg) {
  throw new TestFailure(msg);
}

for (const [what, p] of [
  ['JupyterLab (run tests/browser/setup.sh)', path.join(venv, 'bin', 'jupyter-lab')],
  ['playwright-core (run tests/browser/setup.sh)', path.join(nodeDir, 'node_modules', 'playwright-core')],
  ['Chromium (run tests/browser/setup.sh)', chromiumPath],
]) {
  if (!fs.existsSync(p)) {
    console.error(`lab.mjs: no ${what}: ${p} is missing`);
    process.exit(1);
  }
}
const { chromium } = createRequire(path.join(nodeDir, 'package.json'))('playwright-core');

// ---------------------------------------------------------------- the notebook
const RUST_CELL = [
  'let x = Tensor::randn([1000, 1000], &Device::Cpu)?;',
  'let y = x.to(&Device::Cuda(0))?;',
  'y',
].join('\n');
// placelab's magic: the session's transfers, time against size, drawn by plotters as an SVG
// (src/plot.rs), sent as image/svg+xml.
const RUST_PLOT_CELL = ':plot transfers';
// The stock-kernel cell imitates the kernel's two outputs closely enough for the checks (the
// card is the cell's value, an execute_result; Python sends it after the strip).
const PYTHON_CELL = [
  'from IPython.display import HTML, display',
  'display(HTML(\'<div class="placelab-memory"><div>cpu allocated 3.81 MiB</div>'
    + '<div>cuda:0 (simulated) allocated 3.81 MiB</div></div>\'))',
  'HTML(\'<div class="placelab-tensor"><span>cuda:0 · simulated</span> <b>f32[1000, 1000]</b> 3.81 MiB'
    + ' <div>last .to(): cpu → cuda:0, 1.0 ms</div></div>\')',
].join('\n');
// The plot's stand-in: an SVG with the texts the checks look for, as plotters would draw them.
const PYTHON_PLOT_CELL = [
  'from IPython.display import SVG',
  'SVG(\'<svg xmlns="http://www.w3.org/2000/svg" width="720" height="440" viewBox="0 0 720 440">'
    + '<rect width="720" height="440" fill="white"/>'
    + '<text x="250" y="30" font-size="20">Transfer time against size</text>'
    + '<text x="350" y="430">bytes</text><text x="10" y="220">µs</text>'
    + '<text x="420" y="80">cpu → cuda:0 (pageable, simulated)</text></svg>\')',
].join('\n');

// What the plot's SVG must say (src/plot.rs, TransferAxis::Time): its caption, the
// axis labels and a series for the first cell's copy (its legend: `cpu → cuda:0 (pageable, …)`).
const PLOT_TEXTS = ['Transfer time against size', 'bytes', 'µs'];
const PLOT_SERIES = 'cpu → cuda:0';
// With PLACELAB_SIMULATE_CUDA=1,h100 the card gives the H100's predicted time beside the
// measured one, and the plot its predicted curves (a real kernel only, not --stock-kernel).
const PREDICTED = 'on an H100 SXM (predicted';
const PLOT_PREDICTED = 'H100 SXM predicted, pinned';

function notebookJson() {
  const sources = args.stock ? [PYTHON_CELL, PYTHON_PLOT_CELL] : [RUST_CELL, RUST_PLOT_CELL];
  const kernelspec = args.stock
    ? { name: 'python3', display_name: 'Python 3 (ipykernel)', language: 'python' }
    : { name: args.kernelName, display_name: 'Rust (placelab)', language: 'rust' };
  const lines = (source) => source.split('\n').map((l, i, all) => (i < all.length - 1 ? l + '\n' : l));
  const cell = (id, source) => ({ cell_type: 'code', execution_count: null, id, metadata: {}, outputs: [], source: lines(source) });
  return {
    cells: [cell('move-to-gpu', sources[0]), cell('plot-transfers', sources[1])],
    metadata: { kernelspec, language_info: { name: kernelspec.language } },
    nbformat: 4,
    nbformat_minor: 5,
  };
}

// ---------------------------------------------------------------- the server
function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function startServer() {
  fs.rmSync(notebookDir, { recursive: true, force: true });
  fs.rmSync(labDir, { recursive: true, force: true });
  fs.mkdirSync(notebookDir, { recursive: true });
  for (const d of ['config', 'data', 'runtime', 'settings', 'workspaces', 'ipython']) {
    fs.mkdirSync(path.join(labDir, d), { recursive: true });
  }
  // No announcement toast over the notebook, and no request for news or updates.
  const notif = path.join(labDir, 'settings', '@jupyterlab', 'apputils-extension');
  fs.mkdirSync(notif, { recursive: true });
  fs.writeFileSync(path.join(notif, 'notification.jupyterlab-settings'),
    JSON.stringify({ fetchNews: 'false', checkForUpdates: false }));
  fs.writeFileSync(path.join(notebookDir, 'placelab.ipynb'), JSON.stringify(notebookJson(), null, 1));

  const token = randomBytes(24).toString('hex');
  const port = await freePort();
  const env = {
    ...process.env,
    // The server's environment is the kernels' environment.
    // Standing for an H100: the card and the plot show its predicted costs beside the measured.
    PLACELAB_SIMULATE_CUDA: '1,h100',
    PLACELAB_CACHE: process.env.PLACELAB_CACHE || path.join(target, 'placelab-session-cache'),
    JUPYTER_CONFIG_DIR: path.join(labDir, 'config'),
    JUPYTER_DATA_DIR: path.join(labDir, 'data'),
    JUPYTER_RUNTIME_DIR: path.join(labDir, 'runtime'),
    JUPYTER_PLATFORM_DIRS: '1',
    IPYTHONDIR: path.join(labDir, 'ipython'),
    PATH: `${path.join(venv, 'bin')}:${process.env.PATH}`,
  };
  delete env.JUPYTER_PATH;
  if (args.kernelPrefix) env.JUPYTER_PATH = path.join(args.kernelPrefix, 'share', 'jupyter');
  const logPath = path.join(artefacts, 'jupyter.log');
  const logFd = fs.openSync(logPath, 'w');
  const argv = [
    'lab', '--no-browser', `--IdentityProvider.token=${token}`, `--port=${port}`, '--ip=127.0.0.1',
    '--ServerApp.port_retries=0', `--ServerApp.root_dir=${notebookDir}`,
    `--LabApp.user_settings_dir=${path.join(labDir, 'settings')}`,
    `--LabApp.workspaces_dir=${path.join(labDir, 'workspaces')}`,
    '--LabApp.news_url=None',
    '--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate',
    '--ServerApp.terminals_enabled=False',
  ];
  if (process.getuid && process.getuid() === 0) argv.push('--allow-root');
  log(`starting jupyter lab on 127.0.0.1:${port} (log: ${path.relative(repo, logPath)}${env.JUPYTER_PATH ? `, JUPYTER_PATH=${env.JUPYTER_PATH}` : ''})`);
  const proc = spawn(path.join(venv, 'bin', 'jupyter'), argv, { env, stdio: ['ignore', logFd, logFd] });
  fs.closeSync(logFd);
  const server = { proc, port, token, base: `http://127.0.0.1:${port}`, logPath, exited: null };
  proc.on('exit', (code, signal) => { server.exited = signal || `exit code ${code}`; });

  const deadline = Date.now() + 120_000;
  for (;;) {
    if (server.exited) fail(`jupyter lab ended (${server.exited}) before it served:\n${tail(logPath)}`);
    try {
      const r = await fetch(`${server.base}/api/status`, { headers: { Authorization: `token ${token}` } });
      if (r.ok) break;
    } catch { /* not listening yet */ }
    if (Date.now() > deadline) fail(`jupyter lab did not answer on port ${port} within 120 s:\n${tail(logPath)}`);
    await sleep(250);
  }
  log('jupyter lab is serving');

  const specs = await api(server, '/api/kernelspecs');
  const names = Object.keys(specs.kernelspecs || {});
  if (!names.includes(args.kernelName)) {
    fail(`JupyterLab finds no kernel named ${args.kernelName} (it has: ${names.join(', ') || 'none'}); `
      + (args.kernelPrefix ? `is there ${path.join(args.kernelPrefix, 'share/jupyter/kernels', args.kernelName, 'kernel.json')}?`
        : 'pass --kernel-prefix P after `placelab install-kernel --prefix P`'));
  }
  log(`kernel ${args.kernelName}: ${specs.kernelspecs[args.kernelName].spec.argv.join(' ')}`);
  return server;
}

async function api(server, route) {
  const r = await fetch(`${server.base}${route}`, { headers: { Authorization: `token ${server.token}` } });
  if (!r.ok) throw new Error(`GET ${route}: HTTP ${r.status}`);
  return r.json();
}

async function stopServer(server) {
  if (!server || server.exited) return;
  try {
    await fetch(`${server.base}/api/shutdown`, { method: 'POST', headers: { Authorization: `token ${server.token}` } });
  } catch { /* it may already be going */ }
  for (let i = 0; i < 100 && !server.exited; i++) await sleep(100);
  if (!server.exited) {
    server.proc.kill('SIGTERM');
    for (let i = 0; i < 50 && !server.exited; i++) await sleep(100);
  }
  if (!server.exited) server.proc.kill('SIGKILL');
  log(`jupyter lab stopped (${server.exited || 'killed'})`);
}

function tail(file, n = 40) {
  try {
    return fs.readFileSync(file, 'utf8').trimEnd().split('\n').slice(-n).map((l) => `    ${l}`).join('\n');
  } catch {
    return '    (no log)';
  }
}

// ---------------------------------------------------------------- the browser
async function runNotebook(server, page) {
  const url = `${server.base}/lab/tree/placelab.ipynb?token=${server.token}`;
  log(`opening ${url.replace(server.token, '<token>')}`);
  await page.goto(url, { waitUntil: 'domcontentloaded', timeout: 120_000 });

  const notebook = page.locator('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook');
  await notebook.waitFor({ state: 'visible', timeout: 120_000 });
  const cell = notebook.locator('.jp-CodeCell').first();
  await cell.locator('.cm-content').waitFor({ state: 'visible', timeout: 60_000 });
  log('notebook is open');
  // Fold the file browser away so the output has the page's width (View > Show Left Sidebar).
  if (await page.locator('#jp-left-stack:not(.lm-mod-hidden)').count()) {
    await page.locator('.jp-SideBar.jp-mod-left .lm-TabBar-tab.lm-mod-current').first().click();
  }

  // The kernel is started by the server when the notebook opens; run once the page is
  // connected to it (placelab answers at once; its first cell then waits for the engine's
  // compile). A cell run before the page's kernel connection is up is dropped by JupyterLab,
  // so wait for both sides: the server's session has a connected, idle kernel, and the page's
  // status bar says Idle.
  const statusBar = page.locator('#jp-main-statusbar');
  const kernelDeadline = Date.now() + 180_000;
  let kernelState = '';
  for (;;) {
    const sessions = await api(server, '/api/sessions').catch(() => []);
    const k = sessions.find((x) => x.path && x.path.endsWith('placelab.ipynb'))?.kernel;
    const pageStatus = normalize(await statusBar.innerText({ timeout: 1000 }).catch(() => ''));
    kernelState = `server: ${k ? `${k.name} ${k.execution_state}, ${k.connections} connection(s)` : 'no session'}; page: ${(pageStatus.match(/\|\s*(\w+)/) || [])[1] || '?'}`;
    if (k && k.execution_state === 'idle' && k.connections > 0 && /\|\s*Idle\b/.test(pageStatus)) break;
    if (await page.locator('.jp-Dialog').count()) {
      fail(`JupyterLab shows a dialog instead of running the kernel: ${await page.locator('.jp-Dialog').innerText()}`);
    }
    if (server.exited) fail(`jupyter lab ended (${server.exited}):\n${tail(server.logPath)}`);
    if (Date.now() > kernelDeadline) fail(`the kernel was not connected and idle within 180 s (${kernelState}):\n${tail(server.logPath)}`);
    await sleep(250);
  }
  log(`kernel ready (${kernelState})`);
  log('running the cell (click into it, Shift+Enter)');

  await cell.locator('.cm-content').click();
  await page.keyboard.press('Shift+Enter');
  const pressed = Date.now();

  // Wait for the card, the strip, or the end of the cell without them.
  const output = cell.locator('.jp-OutputArea');
  const card = output.locator('.placelab-tensor');
  const strip = output.locator('.placelab-memory');
  await waitForOutputs(server, page, cell, [
    { loc: card, name: 'a .placelab-tensor card' },
    { loc: strip, name: 'a .placelab-memory strip' },
  ], pressed, cellTimeoutMs, args.stock ? '' : '; on a cold PLACELAB_CACHE the engine compiles first');
  await card.first().waitFor({ state: 'visible', timeout: 10_000 });
  await strip.first().waitFor({ state: 'visible', timeout: 10_000 });
  log('card and memory strip rendered');
  // Let fonts and layout settle before the picture.
  await page.waitForTimeout(500);
  return { notebook, cell, output, card: card.first(), strip: strip.first() };
}

// The second cell, `:plot transfers`, run the same way once the first has finished; its output
// is the plot, image/svg+xml. JupyterLab 4 draws that as an <img> whose src is the SVG as a
// data: URI (rendermime's renderSVG), so the image is looked for as either an <img> or an
// inline <svg>.
async function runPlotCell(server, page, { notebook, cell: first }) {
  const firstPrompt = first.locator('.jp-InputArea-prompt');
  const until = Date.now() + 120_000;
  while (!/^\[\d+\]:$/.test((await firstPrompt.innerText().catch(() => '')).trim())) {
    if (Date.now() > until) fail(`the first cell's prompt did not say it finished within 120 s of its card (it is ${(await firstPrompt.innerText().catch(() => '?')).trim()})`);
    await sleep(250);
  }
  const cell = notebook.locator('.jp-CodeCell').nth(1);
  await cell.locator('.cm-content').waitFor({ state: 'visible', timeout: 30_000 });
  log('running the second cell, :plot transfers (click into it, Shift+Enter)');
  await cell.locator('.cm-content').click();
  await page.keyboard.press('Shift+Enter');
  const pressed = Date.now();

  const output = cell.locator('.jp-OutputArea');
  const rendered = output.locator('.jp-OutputArea-output[data-mime-type="image/svg+xml"]');
  const image = rendered.locator('svg, img[src^="data:image/svg+xml"]');
  // The engine is warm by now and the magic compiles nothing: minutes at most.
  await waitForOutputs(server, page, cell, [{ loc: image, name: 'an image/svg+xml plot' }],
    pressed, Math.min(cellTimeoutMs, 300_000), '');
  await image.first().waitFor({ state: 'visible', timeout: 10_000 });
  // An <img> decodes its data: URI asynchronously.
  await image.first().evaluate((el) => el.tagName !== 'IMG' || el.complete
    || new Promise((resolve) => { el.addEventListener('load', resolve); el.addEventListener('error', resolve); }));
  log('plot rendered');
  await page.waitForTimeout(500);
  return { cell, output, rendered: rendered.first(), image: image.first() };
}

// Tab and Shift+Tab in the third cell, as a person would: the completer offers `zeros` for
// `Tensor::ze` (the Tab starts the kernel's rust-analyzer process, seconds), and the tooltip
// shows the documentation of `Tensor::zeros`.
async function completeAndInspect(page, notebook) {
  const cell = notebook.locator('.jp-CodeCell').nth(2);
  const editor = cell.locator('.cm-content');
  await editor.waitFor({ state: 'visible', timeout: 30_000 });
  await editor.click();
  await page.keyboard.type('Tensor::ze');
  const offered = page.locator('.jp-Completer .jp-Completer-item', { hasText: 'zeros' });
  const until = Date.now() + 120_000;
  // JupyterLab drops a completion that takes over a second (its providerTimeout), and the
  // first one starts the kernel's rust-analyzer (seconds): as a person would, Tab again.
  let tabs = 0;
  let lastTab = 0;
  // One candidate alone is inserted without a list.
  while (!(await offered.count()) && !normalize(await editor.innerText()).startsWith('Tensor::zeros')) {
    if (Date.now() > until) fail(`${tabs} Tabs after Tensor::ze offered no zeros within 120 s (the cell reads ${normalize(await editor.innerText())})`);
    if (Date.now() - lastTab > 5_000) {
      tabs += 1;
      log(`Tab ${tabs} after \`Tensor::ze\``);
      await page.keyboard.press('Tab');
      lastTab = Date.now();
    }
    await sleep(250);
  }
  log(`the completer offers zeros after ${tabs} Tab(s)`);
  await page.keyboard.press('Escape');
  await editor.click();
  await page.keyboard.press('Control+A');
  await page.keyboard.type('Tensor::zeros');
  log('Shift+Tab on `Tensor::zeros`');
  await page.keyboard.press('Shift+Tab');
  const tooltip = page.locator('.jp-Tooltip');
  await tooltip.first().waitFor({ state: 'visible', timeout: 60_000 })
    .catch(() => fail('Shift+Tab on Tensor::zeros showed no tooltip within 60 s'));
  const text = normalize(await tooltip.first().innerText());
  if (!text.includes('zeros')) fail(`the tooltip for Tensor::zeros does not name it: ${text.slice(0, 300)}`);
  log(`the tooltip shows: ${text.slice(0, 80)}`);
  await page.keyboard.press('Escape');
}

// Waits until every one of `wanted` ({ loc, name }) is in `cell`'s output, failing when the
// cell finishes without them, JupyterLab shows a dialog, the server ends, the cell never
// starts or `timeoutMs` passes.
async function waitForOutputs(server, page, cell, wanted, pressed, timeoutMs, coldNote) {
  const output = cell.locator('.jp-OutputArea');
  const prompt = cell.locator('.jp-InputArea-prompt');
  const deadline = Date.now() + timeoutMs;
  const missing = async () => {
    const out = [];
    for (const w of wanted) if (!(await w.loc.count())) out.push(w.name);
    return out;
  };
  let lastNote = Date.now();
  for (;;) {
    const absent = await missing();
    const promptText = (await prompt.innerText().catch(() => '')).trim();
    const finished = /^\[\d+\]:$/.test(promptText);
    if (!absent.length) return;
    if (finished) {
      // The kernel said the cell is done: give the last output a moment to arrive.
      await sleep(2000);
      const still = await missing();
      if (!still.length) return;
      fail(`the cell finished (${promptText}) without ${still.join(' and ')}; its output:\n`
        + indent(await output.innerText().catch(() => '(none)')));
    }
    if (server.exited) fail(`jupyter lab ended (${server.exited}) while the cell ran:\n${tail(server.logPath)}`);
    if (await page.locator('.jp-Dialog').count()) {
      // e.g. "Kernel Restarting: the kernel for placelab.ipynb appears to have died".
      fail(`JupyterLab shows a dialog while the cell runs: ${normalize(await page.locator('.jp-Dialog').innerText())}`
        + `\n  jupyter.log:\n${tail(server.logPath)}`);
    }
    if (!/^\[[*\d]+\]:$/.test(promptText) && Date.now() - pressed > 30_000) {
      fail(`the cell did not start within 30 s of Shift+Enter (its prompt is ${promptText || 'empty'})`);
    }
    if (Date.now() > deadline) {
      fail(`no ${absent.join(' and ')} within ${timeoutMs / 1000} s `
        + `(prompt ${promptText || '?'}); output so far:\n${indent(await output.innerText().catch(() => '(none)'))}`
        + `\n  jupyter.log:\n${tail(server.logPath)}`);
    }
    if (Date.now() - lastNote > 30_000) {
      lastNote = Date.now();
      log(`waiting for the cell's output (prompt ${promptText || '?'}${coldNote})`);
    }
    await sleep(500);
  }
}

function indent(s) {
  return s.trimEnd().split('\n').map((l) => `    ${l}`).join('\n');
}

async function check({ output, card, strip }) {
  const problems = [];
  const cardText = normalize(await card.innerText());
  const stripText = normalize(await strip.innerText());
  const kinds = await output.evaluate((area) => [...area.querySelectorAll(':scope .jp-OutputArea-child')].map((c) => {
    const o = c.querySelector('.jp-OutputArea-output');
    const what = o?.querySelector('.placelab-tensor') ? 'card' : o?.querySelector('.placelab-memory') ? 'strip' : o?.dataset.mimeType;
    return `${c.classList.contains('jp-OutputArea-executeResult') ? 'execute_result' : 'output'}(${what})`;
  }));
  log(`outputs in order: ${kinds.join(', ')}`);
  // The kernel sends the value, then the strip; JupyterLab shows outputs as they arrive.
  if (kinds.indexOf('output(strip)') >= 0 && kinds.indexOf('output(strip)') < kinds.indexOf('execute_result(card)')) {
    log('NOTE: the memory strip is shown above the card (the kernel sent it before the execute_result)');
  }
  log(`card:  ${cardText}`);
  log(`strip: ${stripText}`);
  const cardWants = ['cuda:0', 'simulated', 'f32[1000, 1000]', '3.81 MiB', 'cpu → cuda:0'];
  if (!args.stock) cardWants.push(PREDICTED);
  for (const want of cardWants) {
    if (!cardText.includes(want)) problems.push(`the card does not show "${want}"`);
  }
  // The card is the cell's value (an execute_result, shown with the [n]: prompt); the strip
  // is a display_data beside it.
  const inResult = async (loc) => loc.evaluate((el) => !!el.closest('.jp-OutputArea-executeResult'));
  if (!(await inResult(card))) problems.push('the card is not in the execute_result (the cell\'s value)');
  if (await inResult(strip)) problems.push('the memory strip is the execute_result instead of a display_data');
  // The shape is the card's bold headline.
  const bold = (await card.locator('b').allInnerTexts()).map(normalize);
  if (!bold.includes('f32[1000, 1000]')) problems.push(`the card's <b> is not f32[1000, 1000] (it has: ${JSON.stringify(bold)})`);
  // One row of the strip is cuda:0's: the smallest element that names cuda:0 and not cpu
  // shows the tensor's 3.81 MiB.
  const rows = await strip.evaluate((el) => {
    const out = [];
    for (const e of el.querySelectorAll('*')) {
      const t = (e.innerText || e.textContent || '').replace(/\s+/g, ' ').trim();
      if (t.includes('cuda:0') && !/\bcpu\b/.test(t)) {
        const inner = [...e.children].some((c) => ((c.innerText || c.textContent || '').includes('cuda:0')));
        out.push({ tag: e.tagName.toLowerCase(), text: t, inner });
      }
    }
    return out;
  });
  const row = rows.find((r) => r.text.includes('3.81 MiB'));
  if (!row) {
    problems.push(`the strip has no cuda:0 row showing 3.81 MiB (elements naming cuda:0: ${JSON.stringify(rows.map((r) => r.text))})`);
  } else {
    log(`strip's cuda:0 row (<${row.tag}>): ${row.text}`);
  }
  if (!stripText.includes('cpu')) problems.push('the strip has no cpu row');
  return problems;
}

// The plot: an image/svg+xml output whose SVG has the caption, the axis labels and the first
// cell's cpu → cuda:0 series, and which the browser drew (an <img> that loaded, a sensible size).
async function checkPlot({ output, image }) {
  const problems = [];
  const kinds = await output.evaluate((area) => [...area.querySelectorAll(':scope .jp-OutputArea-child')].map((c) => {
    const o = c.querySelector('.jp-OutputArea-output');
    return `${c.classList.contains('jp-OutputArea-executeResult') ? 'execute_result' : 'output'}(${o?.dataset.mimeType})`;
  }));
  log(`plot cell's outputs in order: ${kinds.join(', ')}`);
  const seen = await image.evaluate((el) => {
    const box = el.getBoundingClientRect();
    let source = null;
    if (el.tagName === 'IMG') {
      const comma = el.src.indexOf(',');
      const head = el.src.slice(0, comma);
      const body = el.src.slice(comma + 1);
      source = head.endsWith(';base64') ? atob(body) : decodeURIComponent(body);
    } else {
      source = el.outerHTML;
    }
    const doc = new DOMParser().parseFromString(source, 'image/svg+xml');
    return {
      tag: el.tagName.toLowerCase(),
      parsed: doc.documentElement.nodeName,
      texts: [...doc.querySelectorAll('text')].map((t) => t.textContent.replace(/\s+/g, ' ').trim()).filter(Boolean),
      natural: el.tagName === 'IMG' ? [el.naturalWidth, el.naturalHeight] : null,
      box: [Math.round(box.width), Math.round(box.height)],
    };
  });
  log(`plot: <${seen.tag}> ${seen.box.join('x')} on the page${seen.natural ? ` (the SVG: ${seen.natural.join('x')})` : ''}, `
    + `${seen.texts.length} texts: ${seen.texts.filter((t) => !/^[\d.e+-]+$/i.test(t)).join(' | ')}`);
  if (seen.parsed !== 'svg') problems.push(`the plot's image is not an SVG (its document is <${seen.parsed}>)`);
  for (const want of PLOT_TEXTS) {
    if (!seen.texts.includes(want)) problems.push(`the plot has no text "${want}" (its texts: ${JSON.stringify(seen.texts)})`);
  }
  if (!seen.texts.some((t) => t.includes(PLOT_SERIES))) {
    problems.push(`the plot's legend has no ${PLOT_SERIES} series (its texts: ${JSON.stringify(seen.texts)})`);
  }
  if (!args.stock && !seen.texts.some((t) => t.includes(PLOT_PREDICTED))) {
    problems.push(`the plot has no "${PLOT_PREDICTED}" curve (its texts: ${JSON.stringify(seen.texts)})`);
  }
  if (seen.natural && !(seen.natural[0] > 0 && seen.natural[1] > 0)) problems.push('the plot\'s <img> did not load');
  if (seen.box[0] < 300 || seen.box[1] < 150) problems.push(`the plot is drawn ${seen.box.join('x')} px on the page`);
  return problems;
}

// The README's picture (notebooks/screenshot.png is a copy of it): the two cells, the first's
// code, card and strip and the second's plot, cropped to the cells, README_SHOT.width CSS px
// wide (the notebook panel's width) at README_SHOT.scale device pixels per CSS px. maxBytes keeps
// the repository small: the card's measured line and the plot's measured points took it from
// 176 KB to 210 KB (2026-11-27).
const README_SHOT = { width: 960, scale: 1.5, maxBytes: 240_000 };

async function readmeShot(page, notebook, cells, next) {
  const file = path.join(artefacts, 'readme.png');
  // Command mode: no text cursor in the picture. (The file browser is already folded away.)
  await page.keyboard.press('Escape');
  const vp = page.viewportSize();
  const chrome = vp.width - (await notebook.boundingBox()).width;
  const width = README_SHOT.width + chrome;
  let height = 1600;
  const cdp = await page.context().newCDPSession(page);
  for (;;) {
    await page.setViewportSize({ width, height });
    await cdp.send('Emulation.setDeviceMetricsOverride', { width, height, deviceScaleFactor: README_SHOT.scale, mobile: false });
    // The notebook scrolled to its top (the cells are its first two).
    await notebook.evaluate((el) => { (el.querySelector('.jp-WindowedPanel-outer') || el).scrollTop = 0; });
    await page.waitForTimeout(700);
    const nb = await notebook.boundingBox();
    const first = await cells[0].boundingBox();
    const last = await cells[cells.length - 1].boundingBox();
    // Shift+Enter on the last cell added an empty one below it, the active cell, whose blue
    // border reaches a few px above its box: it stays out of the picture.
    const below = (await next.count()) ? (await next.boundingBox()).y : Infinity;
    const top = Math.max(nb.y + 1, first.y - 8);
    const bottom = Math.min(below - 6, last.y + last.height + 8);
    // Less the panel's 1 px border on the right.
    const [left, right] = [Math.ceil(nb.x), Math.floor(nb.x + nb.width) - 1];
    const clip = { x: left, y: Math.round(top), width: right - left, height: Math.round(bottom - top) };
    if (clip.y + clip.height > nb.y + nb.height) {
      // The cells do not fit the notebook panel: a taller page.
      if (height >= 4000) fail(`the two cells do not fit a ${width}x${height} page for the README's picture`);
      height += 800;
      continue;
    }
    const { data } = await cdp.send('Page.captureScreenshot', { format: 'png', clip: { ...clip, scale: 1 }, captureBeyondViewport: false });
    fs.writeFileSync(file, Buffer.from(data, 'base64'));
    log(`README picture: ${clip.width}x${clip.height} CSS px at ${README_SHOT.scale}x, ${fs.statSync(file).size} bytes`);
    break;
  }
  await cdp.detach();
  const bytes = fs.statSync(file).size;
  if (bytes > README_SHOT.maxBytes) fail(`the README's picture ${path.relative(repo, file)} is ${bytes} bytes, over ${README_SHOT.maxBytes}`);
  return file;
}

function normalize(s) {
  return s.replace(/\s+/g, ' ').trim();
}

// ---------------------------------------------------------------- main
async function main() {
  fs.rmSync(artefacts, { recursive: true, force: true });
  fs.mkdirSync(artefacts, { recursive: true });
  let server = null;
  let browser = null;
  let page = null;
  const onSignal = async (sig) => {
    console.error(`lab.mjs: ${sig}: stopping`);
    try { if (browser) await browser.close(); } catch { /* ignore */ }
    await stopServer(server);
    process.exit(130);
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  try {
    server = await startServer();
    browser = await chromium.launch({
      executablePath: chromiumPath,
      headless: true,
      // Playwright gives the browser a new empty profile (--user-data-dir) of its own.
      args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
        '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    });
    const context = await browser.newContext({ viewport: { width: 1400, height: 900 }, deviceScaleFactor: 1 });
    page = await context.newPage();
    page.setDefaultTimeout(60_000);
    const consoleErrors = [];
    page.on('console', (m) => { if (m.type() === 'error') consoleErrors.push(m.text()); });
    log(`Chromium ${browser.version()}`);

    const found = await runNotebook(server, page);
    await found.output.screenshot({ path: path.join(artefacts, 'output.png') });
    fs.writeFileSync(path.join(artefacts, 'output.html'), await found.output.innerHTML());
    const problems = await check(found);
    const plot = await runPlotCell(server, page, found);
    await page.screenshot({ path: path.join(artefacts, 'notebook.png') });
    await plot.output.screenshot({ path: path.join(artefacts, 'plot.png') });
    log(`screenshot: ${path.relative(repo, path.join(artefacts, 'notebook.png'))}`);
    problems.push(...await checkPlot(plot));
    if (consoleErrors.length) {
      fs.writeFileSync(path.join(artefacts, 'console-errors.txt'), consoleErrors.join('\n') + '\n');
    }
    if (problems.length) fail(`the rendered page is wrong:\n${problems.map((p) => `  - ${p}`).join('\n')}`);
    const readme = await readmeShot(page, found.notebook, [found.cell, plot.cell],
      found.notebook.locator('.jp-Cell').nth(2));
    log(`README picture: ${path.relative(repo, readme)} (cp ${path.relative(repo, readme)} notebooks/screenshot.png refreshes the README's copy)`);
    if (!args.stock) await completeAndInspect(page, found.notebook);
    log(`PASS: the notebook shows the tensor card on cuda:0 (simulated), f32[1000, 1000], the memory strip's cuda:0 row, and the :plot transfers SVG${args.stock ? '' : '; Tab completes Tensor::ze and Shift+Tab shows Tensor::zeros'}`);
    return 0;
  } catch (e) {
    console.error(`\nlab.mjs: FAIL: ${e instanceof TestFailure ? e.message : e.stack || e}`);
    if (page) {
      try {
        await page.screenshot({ path: path.join(artefacts, 'failure.png') });
        console.error(`lab.mjs: the page at the failure: ${path.relative(repo, path.join(artefacts, 'failure.png'))}`);
      } catch { /* the page may be gone */ }
    }
    return 1;
  } finally {
    try { if (browser) await browser.close(); } catch { /* ignore */ }
    await stopServer(server);
  }
}

process.exit(await main());
