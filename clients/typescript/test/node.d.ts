// The few Node APIs the tests use. typescript is the package's only dev dependency (no
// @types/node), so these declarations stand in for it; they cover only what is called here.

declare const process: {
  env: Record<string, string | undefined>;
};

declare module "node:test" {
  type Fn = () => unknown | Promise<unknown>;
  interface Options { skip?: boolean | string; timeout?: number; concurrency?: number | boolean }
  export function describe(name: string, options: Options, fn: Fn): Promise<void>;
  export function describe(name: string, fn: Fn): Promise<void>;
  export function it(name: string, options: Options, fn: Fn): Promise<void>;
  export function it(name: string, fn: Fn): Promise<void>;
  export function before(fn: Fn, options?: { timeout?: number }): void;
  export function after(fn: Fn, options?: { timeout?: number }): void;
}

declare module "node:assert/strict" {
  function assert(value: unknown, message?: string): asserts value;
  namespace assert {
    function ok(value: unknown, message?: string): asserts value;
    function equal<T>(actual: unknown, expected: T, message?: string): asserts actual is T;
    function notEqual(actual: unknown, expected: unknown, message?: string): void;
    function deepEqual<T>(actual: unknown, expected: T, message?: string): asserts actual is T;
    function match(value: string, re: RegExp, message?: string): void;
    function fail(message?: string): never;
    function rejects(
      fn: Promise<unknown> | (() => Promise<unknown>),
      check?: ((err: any) => boolean) | (new (...args: any[]) => Error),
      message?: string,
    ): Promise<void>;
  }
  export default assert;
}

declare module "node:child_process" {
  interface Readable {
    setEncoding(encoding: "utf8"): void;
    on(event: "data", listener: (chunk: string) => void): void;
  }
  export interface ChildProcess {
    readonly pid?: number;
    readonly exitCode: number | null;
    readonly signalCode: string | null;
    readonly stderr: Readable | null;
    kill(signal?: "SIGTERM" | "SIGKILL"): boolean;
    once(event: "exit", listener: (code: number | null, signal: string | null) => void): void;
    once(event: "error", listener: (err: Error) => void): void;
  }
  interface SpawnOptions {
    env?: Record<string, string | undefined>;
    stdio?: Array<"ignore" | "pipe" | "inherit">;
  }
  export function spawn(command: string, args: string[], options?: SpawnOptions): ChildProcess;
  export function execFileSync(
    file: string,
    args: string[],
    options: { encoding: "utf8"; env?: Record<string, string | undefined>; input?: string },
  ): string;
}

declare module "node:fs" {
  export function mkdtempSync(prefix: string): string;
  export function writeFileSync(path: string, data: string): void;
  export function rmSync(path: string, options?: { recursive?: boolean; force?: boolean }): void;
}

declare module "node:os" {
  export function tmpdir(): string;
}

declare module "node:path" {
  export function join(...parts: string[]): string;
}
