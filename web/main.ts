/**
 * The page: a hash router over three views (jobs, a job, the fleet) and the login form. A view
 * that gets 401/403 hands over to the login; any other failure is said in words in the view.
 */
import './style.css';
import { ApiError, api, token } from './api.js';
import { esc } from './format.js';
import { fleetPage } from './pages/fleet.js';
import { jobPage } from './pages/job.js';
import { jobsPage } from './pages/jobs.js';

/** What a view gets: where to draw, and how to say it could not load. */
export interface View {
  main: HTMLElement;
  /** Schedules `fn` now and every `ms` until the view is left. */
  poll(fn: () => Promise<void>, ms: number): void;
  /** Shows the error in words above the view (or the login, for 401/403). */
  fail(err: unknown): void;
}

const main = document.getElementById('main') as HTMLElement;
const status = document.getElementById('status') as HTMLElement;
const logout = document.getElementById('logout') as HTMLButtonElement;
let leave: () => void = () => {};

function showLogin(message = ''): void {
  leave();
  document.body.dataset.view = 'login';
  main.innerHTML = `
    <form id="login" class="card login">
      <h1>Sign in</h1>
      <p>Paste a token with the <code>read</code> scope (from the server's <code>--auth</code> file or its <code>--token</code>).
      It stays in this browser tab until the tab is closed.</p>
      <label>Token <input name="token" type="password" autocomplete="off" required autofocus></label>
      <button type="submit">Open</button>
      <p class="error" role="alert">${esc(message)}</p>
    </form>`;
  const form = main.querySelector('form') as HTMLFormElement;
  form.onsubmit = async (e) => {
    e.preventDefault();
    const t = String(new FormData(form).get('token') ?? '').trim();
    token.set(t);
    try {
      await api('/v1/jobs', { limit: 1 });
      route();
    } catch (err) {
      if (err instanceof ApiError && err.auth) {
        token.clear();
        showLogin(
          err.status === 403
            ? 'This token has no read scope: use one whose scopes include "read".'
            : 'This server does not know that token: check it against the --auth file.',
        );
      } else route();
    }
  };
}

function fail(err: unknown): void {
  if (err instanceof ApiError && err.auth) {
    showLogin(token.get() ? 'The token was refused: sign in again.' : '');
    return;
  }
  const msg = err instanceof Error ? err.message : String(err);
  let banner = main.querySelector<HTMLElement>('#banner');
  if (!banner) {
    banner = document.createElement('p');
    banner.id = 'banner';
    banner.className = 'error';
    banner.setAttribute('role', 'alert');
    main.prepend(banner);
  }
  banner.textContent = msg;
  // Nothing stays "Loading…": sections that never got data say so.
  for (const el of main.querySelectorAll<HTMLElement>('.pending')) {
    el.textContent = 'Not loaded: see the message above.';
    el.classList.remove('pending');
  }
  status.textContent = 'not updated';
}

function route(): void {
  leave();
  const timers: number[] = [];
  let live = true;
  leave = () => {
    live = false;
    for (const t of timers) clearTimeout(t);
  };
  const view: View = {
    main,
    fail,
    poll(fn, ms) {
      const tick = async () => {
        if (!live) return;
        try {
          await fn();
          main.querySelector('#banner')?.remove();
          status.textContent = `updated ${new Date().toLocaleTimeString()}`;
        } catch (err) {
          if (live) fail(err);
          if (err instanceof ApiError && err.auth) return;
        }
        if (live) timers.push(window.setTimeout(tick, ms));
      };
      void tick();
    },
  };
  logout.hidden = !token.get();
  const hash = location.hash.replace(/^#\/?/, '');
  const [page, ...rest] = hash.split('/');
  main.innerHTML = '';
  if (page === 'job' && rest.length) {
    document.body.dataset.view = 'job';
    jobPage(view, decodeURIComponent(rest.join('/')));
  } else if (page === 'fleet') {
    document.body.dataset.view = 'fleet';
    fleetPage(view);
  } else {
    document.body.dataset.view = 'jobs';
    jobsPage(view);
  }
}

logout.onclick = () => {
  token.clear();
  showLogin();
};
window.addEventListener('hashchange', route);
route();
