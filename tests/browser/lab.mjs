// The browser test: JupyterLab in headless Chromium runs one notebook cell on the placelab
// kernel and the rendered page is checked. See README.md here; tests/jupyter/browser.rs runs it.
//
//   node tests/browser/lab.mjs [--kernel-prefix P] [--kernel-name N] [--stock-kernel]
//
// 1. starts `jupyter lab` (from target/browser-venv) on 127.0.0.1 at a free port with a random
//    token, its notebook folder target/browser-notebooks/ and its config, data, runtime,
//    settings and workspace folders fresh under target/browser-lab/;
// 2. writes placelab.ipynb there, whose kernelspec is the placelab kernel and whose one cell
//    moves a 1000x1000 tensor to a simulated cuda:0;
// 3. opens it in Debian's Chromium through playwright-core, clicks into the cell and presses
//    Shift+Enter, as a person would;
// 4. waits for the tensor card (.placelab-tensor) and the memory strip (.placelab-memory) and
//    asserts on what they show: the card's device and shape, the strip's cuda:0 row;
// 5. keeps target/browser-artefacts/{notebook.png, output.png, output.html, jupyter.log}
//    (failure.png instead when it fails) and shuts the server and its kernels down.
// Exits 0 when every check passed, 1 with the reason otherwise.
//
// --kernel-prefix P   the prefix given to `placelab install-kernel --prefix P`: the server
//                     looks for kernels in P/share/jupyter (JUPYTER_PATH).
// --kernel-name N     the kernelspec's name (default placelab).
// --stock-kernel      the venv's python3 kernel and a Python cell that displays HTML with the
//                     same classes and text: checks the browser mechanics without placelab.
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
// The stock-kernel cell imitates the kernel's two outputs closely enough for the checks (the
// card is the cell's value, an execute_result; Python sends it after the strip).
const PYTHON_CELL = [
  'from IPython.display import HTML, display',
  'display(HTML(\'<div class="placelab-memory"><div>cpu allocated 3.81 MiB</div>'
    + '<div>cuda:0 (simulated) allocated 3.81 MiB</div></div>\'))',
  'HTML(\'<div class="placelab-tensor"><span>cuda:0 · simulated</span> <b>f32[1000, 1000]</b> 3.81 MiB'
    + ' <div>last .to(): cpu → cuda:0, 1.0 ms</div></div>\')',
].join('\n');

function notebookJson() {
  const source = args.stock ? PYTHON_CELL : RUST_CELL;
  const kernelspec = args.stock
    ? { name: 'python3', display_name: 'Python 3 (ipykernel)', language: 'python' }
    : { name: args.kernelName, display_name: 'Rust (placelab)', language: 'rust' };
  const lines = source.split('\n').map((l, i, all) => (i < all.length - 1 ? l + '\n' : l));
  return {
    cells: [{ cell_type: 'code', execution_count: null, id: 'move-to-gpu', metadata: {}, outputs: [], source: lines }],
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
    PLACELAB_SIMULATE_CUDA: '1',
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
  const prompt = cell.locator('.jp-InputArea-prompt');
  const deadline = Date.now() + cellTimeoutMs;
  let lastNote = Date.now();
  for (;;) {
    const [cards, strips] = [await card.count(), await strip.count()];
    const promptText = (await prompt.innerText().catch(() => '')).trim();
    const finished = /^\[\d+\]:$/.test(promptText);
    if (cards && strips) break;
    if (finished) {
      // The kernel said the cell is done: give the last output a moment to arrive.
      await sleep(2000);
      if ((await card.count()) && (await strip.count())) break;
      fail(`the cell finished (${promptText}) without ${cards ? '' : 'a .placelab-tensor card'}`
        + `${!cards && !strips ? ' and ' : ''}${strips ? '' : 'a .placelab-memory strip'}; its output:\n`
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
      fail(`no .placelab-tensor card and .placelab-memory strip within ${cellTimeoutMs / 1000} s `
        + `(prompt ${promptText || '?'}); output so far:\n${indent(await output.innerText().catch(() => '(none)'))}`
        + `\n  jupyter.log:\n${tail(server.logPath)}`);
    }
    if (Date.now() - lastNote > 30_000) {
      lastNote = Date.now();
      log(`waiting for the cell's output (prompt ${promptText || '?'}${args.stock ? '' : '; on a cold PLACELAB_CACHE the engine compiles first'})`);
    }
    await sleep(500);
  }
  await card.first().waitFor({ state: 'visible', timeout: 10_000 });
  await strip.first().waitFor({ state: 'visible', timeout: 10_000 });
  log('card and memory strip rendered');
  // Let fonts and layout settle before the picture.
  await page.waitForTimeout(500);
  return { output, card: card.first(), strip: strip.first() };
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
  for (const want of ['cuda:0', 'simulated', 'f32[1000, 1000]', '3.81 MiB', 'cpu → cuda:0']) {
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
    await page.screenshot({ path: path.join(artefacts, 'notebook.png') });
    await found.output.screenshot({ path: path.join(artefacts, 'output.png') });
    fs.writeFileSync(path.join(artefacts, 'output.html'), await found.output.innerHTML());
    log(`screenshot: ${path.relative(repo, path.join(artefacts, 'notebook.png'))}`);
    const problems = await check(found);
    if (consoleErrors.length) {
      fs.writeFileSync(path.join(artefacts, 'console-errors.txt'), consoleErrors.join('\n') + '\n');
    }
    if (problems.length) fail(`the rendered page is wrong:\n${problems.map((p) => `  - ${p}`).join('\n')}`);
    log('PASS: the notebook shows the tensor card on cuda:0 (simulated), f32[1000, 1000], and the memory strip\'s cuda:0 row');
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
