#!/usr/bin/env node
// A remote env server in plain Node.js (no dependencies): tic-tac-toe served over the pzasync remote env
// protocol, version 1 (docs/remote.md). Run it, then train on it from Python:
//
//   node examples/remote_node/server.js --socket /tmp/ttt.sock [--instances 16] [--paced [--pace-ms 1]]
//   pzasync train unix:///tmp/ttt.sock            (or let pzasync launch it:)
//   pzasync train "cmd:node examples/remote_node/server.js --socket {socket}"
//
// The game: two players, "player_0" (X, moves first) and "player_1" (O), on a 3x3 board. Action Discrete(9),
// the cell (row * 3 + col). Observation Dict{observation: Box(0,1,(3,3,2),int8) (plane 0: my marks, plane 1:
// the opponent's), action_mask: Box(0,1,(9,),int8)}. A win pays +1 to the winner, -1 to the loser; a full board
// is a draw (0 each). At the end both players are terminated and, as in PettingZoo, each is then stepped with
// None once (its "dead step"), which removes it from `agents`.
//
// With --paced the server sets its own pace (docs/remote.md, "Replies at the server's pace"): its WELCOME says
// "paced": true, and each instance of a STEP or RESET is answered by a STATE of its own, sent after
// (instance % 3) * pace-ms milliseconds, so the replies come back in another order than asked, one at a time.
'use strict';

const net = require('net');
const fs = require('fs');

const VERSION = 1;
const MAGIC = 'PZAS';
const KIND = { HELLO: 1, WELCOME: 2, RESET: 3, STEP: 4, STATE: 5, OBSERVE: 6, OBSERVATION: 7, PING: 8, PONG: 9, ERROR: 10 };
const NONE_ACTION = 1;
const HAS_OPTIONS = 2;
const NO_OBS = 4;
const MAX_FRAME = 1 << 28;

// ------------------------------------------------------------------------------------------------- the env
const AGENTS = ['player_0', 'player_1'];
const SPACES = {
  observation: { type: 'Dict', spaces: [
    ['observation', { type: 'Box', shape: [3, 3, 2], dtype: 'int8', low: 0, high: 1 }],
    ['action_mask', { type: 'Box', shape: [9], dtype: 'int8', low: 0, high: 1 }],
  ] },
  action: { type: 'Discrete', n: 9, start: 0 },
};
const LINES = [[0, 1, 2], [3, 4, 5], [6, 7, 8], [0, 3, 6], [1, 4, 7], [2, 5, 8], [0, 4, 8], [2, 4, 6]];

class TicTacToe {
  reset() {
    this.board = new Array(9).fill(-1);  // -1 empty, else the index of the player who marked it
    this.agents = AGENTS.slice();
    this.selection = 0;
    this.rewards = [0, 0];
    this.cumulative = [0, 0];
    this.terminations = [false, false];
    this.truncations = [false, false];
  }

  dead(i) { return this.terminations[i] || this.truncations[i]; }

  step(action) {
    const me = this.selection;
    if (this.dead(me)) {  // PettingZoo's _was_dead_step: remove the agent, select the next dead one
      if (action !== null) throw new Error(`agent ${AGENTS[me]} is dead: the only valid action is None`);
      this.agents = this.agents.filter((a) => a !== AGENTS[me]);
      const dead = this.agents.map((a) => AGENTS.indexOf(a)).filter((i) => this.dead(i));
      if (dead.length) this.selection = dead[0];
      this.rewards = [0, 0];
      return;
    }
    if (action === null || !(action >= 0 && action < 9) || this.board[action] !== -1) {
      throw new Error(`illegal move ${action} by ${AGENTS[me]}`);
    }
    this.rewards = [0, 0];
    this.cumulative[me] = 0;
    this.board[action] = me;
    const won = LINES.some((line) => line.every((c) => this.board[c] === me));
    if (won) {
      this.rewards[me] = 1;
      this.rewards[1 - me] = -1;
    }
    if (won || this.board.every((c) => c !== -1)) this.terminations = [true, true];
    this.selection = 1 - me;
    for (let i = 0; i < 2; i++) this.cumulative[i] += this.rewards[i];
  }

  // The observation's bytes in the protocol's fixed layout: the Dict's leaves in order, int8 each.
  observe(i, out, at) {
    for (let c = 0; c < 9; c++) {
      out[at + 2 * c] = this.board[c] === i ? 1 : 0;
      out[at + 2 * c + 1] = this.board[c] === 1 - i ? 1 : 0;
    }
    const live = this.selection === i && !this.dead(i);
    for (let c = 0; c < 9; c++) out[at + 18 + c] = live && this.board[c] === -1 ? 1 : 0;
  }
}

// ------------------------------------------------------------------------------------------------- layouts
// Both sides derive the record sizes from the spaces (docs/remote.md, "Fixed layouts").
const DTYPE_BYTES = { int8: 1, uint8: 1, int16: 2, uint16: 2, int32: 4, uint32: 4, float32: 4, int64: 8, float64: 8 };
function spaceBytes(space) {
  switch (space.type) {
    case 'Box': return space.shape.reduce((a, b) => a * b, 1) * DTYPE_BYTES[space.dtype];
    case 'Discrete': return 8;
    case 'MultiDiscrete': return 8 * space.nvec.length;
    case 'MultiBinary': return Array.isArray(space.n) ? space.n.reduce((a, b) => a * b, 1) : space.n;
    case 'Dict': return space.spaces.reduce((sum, [, sub]) => sum + spaceBytes(sub), 0);
    case 'Tuple': return space.spaces.reduce((sum, sub) => sum + spaceBytes(sub), 0);
    default: throw new Error(`no layout for ${space.type}`);
  }
}
const P = AGENTS.length;
const OBS_BYTES = spaceBytes(SPACES.observation);
const MASK_BYTES = SPACES.action.type === 'Discrete' ? SPACES.action.n : 0;
const ACTION_BYTES = spaceBytes(SPACES.action);
const SNAPSHOT_BYTES = 4 + 2 + 2 + 2 + 2 * P + 8 * P + 8 * P + P + P + OBS_BYTES + MASK_BYTES;
const STEP_BYTES = 4 + 1 + ACTION_BYTES;
const RESET_BYTES = 4 + 1 + 8;
const OBSERVE_BYTES = 4 + 2;
const OBSERVATION_BYTES = 4 + 2 + 2 + OBS_BYTES + MASK_BYTES;

// ------------------------------------------------------------------------------------------------- frames
function frame(kind, body) {
  const head = Buffer.alloc(5);
  head.writeUInt32LE(body.length + 1, 0);
  head.writeUInt8(kind, 4);
  return Buffer.concat([head, body]);
}

function errorFrame(code, message, extra = {}) {
  return frame(KIND.ERROR, Buffer.from(JSON.stringify({ code, message, ...extra })));
}

function withCount(count, records) {
  const head = Buffer.alloc(4);
  head.writeUInt32LE(count, 0);
  return Buffer.concat([head, records]);
}

class Refused extends Error {
  constructor(code, message, close = false, extra = {}) {
    super(message);
    Object.assign(this, { code, close, extra });
  }
}

function records(body, size) {
  if (body.length < 4) throw new Refused('malformed', 'a record count was expected', true);
  const count = body.readUInt32LE(0);
  if (4 + count * size > body.length) {
    throw new Refused('malformed', `${count} records of ${size} bytes need ${count * size} bytes, the frame has ${body.length - 4}`, true);
  }
  return { count, at: (k) => 4 + k * size, tail: 4 + count * size };
}

// One snapshot: every agent's state as the game shows it after a step.
function snapshot(instance, game) {
  const out = Buffer.alloc(SNAPSHOT_BYTES);
  const order = game.agents.map((a) => AGENTS.indexOf(a));
  const live = order.includes(game.selection);
  let at = 0;
  out.writeUInt32LE(instance, at); at += 4;
  out.writeUInt16LE(live ? 0 : NO_OBS, at); at += 2;
  out.writeUInt16LE(game.selection, at); at += 2;
  out.writeUInt16LE(order.length, at); at += 2;
  for (let j = 0; j < P; j++, at += 2) out.writeUInt16LE(j < order.length ? order[j] : 0, at);
  for (let i = 0; i < P; i++, at += 8) out.writeDoubleLE(order.includes(i) ? game.rewards[i] : 0, at);
  for (let i = 0; i < P; i++, at += 8) out.writeDoubleLE(order.includes(i) ? game.cumulative[i] : 0, at);
  for (let i = 0; i < P; i++, at += 1) out.writeUInt8(game.terminations[i] ? 1 : 0, at);
  for (let i = 0; i < P; i++, at += 1) out.writeUInt8(game.truncations[i] ? 1 : 0, at);
  if (live) game.observe(game.selection, out, at);
  return out;  // the mask bytes stay zero: this game's mask is in its observation, its infos are empty
}

// After a step or reset: a snapshot, then each dead agent whose turn it is stepped with None, a snapshot each.
function chain(instance, game, out) {
  out.push(snapshot(instance, game));
  while (game.agents.length && game.dead(game.selection)) {
    game.step(null);
    out.push(snapshot(instance, game));
  }
}

function stateFrame(snapshots) {
  return frame(KIND.STATE, withCount(snapshots.length, Buffer.concat(snapshots)));
}

// ------------------------------------------------------------------------------------------------- serving
function answer(conn, kind, body) {
  if (!conn.greeted) {
    if (kind !== KIND.HELLO || body.length < 6 || body.toString('latin1', 0, 4) !== MAGIC) {
      throw new Refused('malformed', 'the first frame must be HELLO', true);
    }
    const version = body.readUInt16LE(4);
    if (version !== VERSION) {
      throw new Refused('version', `this server speaks protocol version ${VERSION}, the client ${version}`, true);
    }
    conn.greeted = true;
    const spaces = Object.fromEntries(AGENTS.map((a) => [a, SPACES]));
    const description = {
      protocol: VERSION, name: 'tictactoe_js', max_instances: conn.maxInstances, possible_agents: AGENTS, spaces,
      layout: { obs_bytes: OBS_BYTES, mask_bytes: MASK_BYTES, action_bytes: ACTION_BYTES, snapshot_bytes: SNAPSHOT_BYTES,
        step_bytes: STEP_BYTES, observation_bytes: OBSERVATION_BYTES },
    };
    if (conn.paceMs !== null) description.paced = true;
    const version16 = Buffer.alloc(2);
    version16.writeUInt16LE(VERSION, 0);
    return frame(KIND.WELCOME, Buffer.concat([version16, Buffer.from(JSON.stringify(description))]));
  }
  const game = (instance, create) => {
    if (conn.busy.has(instance)) throw new Refused('instance', `instance ${instance} is named before its last STEP or RESET was answered`, false, { instance });
    if (instance >= conn.maxInstances) throw new Refused('instance', `instance ${instance} is past this server's limit of ${conn.maxInstances}`);
    if (!conn.games.has(instance)) {
      if (!create) throw new Refused('instance', `instance ${instance} was stepped before it was reset`, false, { instance });
      conn.games.set(instance, new TicTacToe());
    }
    return conn.games.get(instance);
  };
  const out = [];
  // Paced: each instance's snapshots in a STATE of its own, later (null: nothing to send now).
  const paced = conn.paceMs !== null;
  const later = (instance, snapshots) => {
    conn.busy.add(instance);
    setTimeout(() => {
      conn.busy.delete(instance);
      if (!conn.socket.destroyed) conn.socket.write(stateFrame(snapshots));
    }, (instance % 3) * conn.paceMs);
  };
  if (kind === KIND.RESET) {
    const r = records(body, RESET_BYTES);
    for (let k = 0; k < r.count; k++) {  // the seed is ignored (the game has no randomness), so are options
      const instance = body.readUInt32LE(r.at(k));
      const g = game(instance, true);
      g.reset();
      const mine = paced ? [] : out;
      chain(instance, g, mine);
      if (paced) later(instance, mine);
    }
    return paced ? null : stateFrame(out);
  }
  if (kind === KIND.STEP) {
    const r = records(body, STEP_BYTES);
    for (let k = 0; k < r.count; k++) {
      const at = r.at(k);
      const instance = body.readUInt32LE(at);
      const g = game(instance, false);
      const action = body.readUInt8(at + 4) & NONE_ACTION ? null : Number(body.readBigInt64LE(at + 5));
      try {
        g.step(action);
      } catch (err) {
        conn.games.delete(instance);
        throw new Refused('env', err.message, false, { instance, agent: AGENTS[g.selection], type: 'builtins:ValueError' });
      }
      const mine = paced ? [] : out;
      chain(instance, g, mine);
      if (paced) later(instance, mine);
    }
    return paced ? null : stateFrame(out);
  }
  if (kind === KIND.OBSERVE) {
    const r = records(body, OBSERVE_BYTES);
    for (let k = 0; k < r.count; k++) {
      const instance = body.readUInt32LE(r.at(k));
      const agent = body.readUInt16LE(r.at(k) + 4);
      const rec = Buffer.alloc(OBSERVATION_BYTES);
      rec.writeUInt32LE(instance, 0);
      rec.writeUInt16LE(agent, 4);
      game(instance, false).observe(agent, rec, 8);
      out.push(rec);
    }
    return frame(KIND.OBSERVATION, withCount(out.length, Buffer.concat(out)));
  }
  if (kind === KIND.PING) return frame(KIND.PONG, body);
  throw new Refused('malformed', `unknown message kind ${kind}`, true);
}

function serveConnection(socket, maxInstances, paceMs) {
  const conn = { greeted: false, games: new Map(), busy: new Set(), maxInstances, paceMs, socket };
  let buffer = Buffer.alloc(0);
  socket.on('data', (data) => {
    buffer = Buffer.concat([buffer, data]);
    while (buffer.length >= 4) {
      const length = buffer.readUInt32LE(0);
      if (length < 1 || length > MAX_FRAME) {
        socket.end(errorFrame('malformed', `malformed frame (announced length ${length})`));
        return;
      }
      if (buffer.length < 4 + length) return;
      const kind = buffer.readUInt8(4);
      const body = buffer.subarray(5, 4 + length);
      buffer = buffer.subarray(4 + length);
      try {
        const reply = answer(conn, kind, body);
        if (reply !== null) socket.write(reply);
      } catch (err) {
        if (!(err instanceof Refused)) throw err;
        const reply = errorFrame(err.code, err.message, err.extra);
        if (err.close) { socket.end(reply); return; }
        socket.write(reply);
      }
    }
  });
  socket.on('error', () => socket.destroy());
}

function main() {
  const args = process.argv.slice(2);
  const option = (name, fallback) => {
    const i = args.indexOf(name);
    return i >= 0 ? args[i + 1] : fallback;
  };
  const socketPath = option('--socket');
  const port = option('--port');
  const maxInstances = Number(option('--instances', '16'));
  const paceMs = args.includes('--paced') ? Number(option('--pace-ms', '1')) : null;
  if (!socketPath && !port) {
    console.error('usage: node server.js (--socket PATH | --port PORT [--host HOST]) [--instances N] [--paced [--pace-ms MS]]');
    process.exit(2);
  }
  const server = net.createServer({ noDelay: true }, (socket) => serveConnection(socket, maxInstances, paceMs));
  const stop = () => {
    server.close();
    if (socketPath) { try { fs.unlinkSync(socketPath); } catch (e) { /* already gone */ } }
    process.exit(0);
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
  const listening = () => {
    const where = socketPath ? `unix://${socketPath}` : `tcp://${server.address().address}:${server.address().port}`;
    const pace = paceMs === null ? '' : `; paced, each instance answered after (instance % 3) * ${paceMs} ms`;
    console.error(`pzasync remote: serving tictactoe_js at ${where} (up to ${maxInstances} instances per connection${pace})`);
  };
  if (socketPath) {
    if (fs.existsSync(socketPath)) fs.unlinkSync(socketPath);
    server.listen(socketPath, listening);
  } else {
    server.listen(Number(port), option('--host', '127.0.0.1'), listening);
  }
}

main();
