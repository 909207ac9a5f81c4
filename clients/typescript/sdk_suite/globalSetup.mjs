// One real stasis daemon for the whole run, on the backend named by
// STASIS_SDK_SUITE_BACKEND (process by default); the tests reach it through
// `inject('stasis')`.
import { Daemon } from '../test/daemon.mjs';

let daemon;

export async function setup(project) {
  const backend = process.env.STASIS_SDK_SUITE_BACKEND || 'process';
  daemon = await new Daemon(backend).start();
  project.provide('stasis', { backend, ...daemon.conn() });
}

export async function teardown() {
  await daemon?.stop();
}
