/** One status line on stderr: rewritten in place on a terminal, printed every quarter otherwise. */
export class Progress {
  private readonly tty = process.stderr.isTTY === true;
  private lastQuarter = -1;
  private shown = false;

  update(fraction: number, text: string): void {
    if (this.tty) {
      process.stderr.write(`\r\x1b[2K${text}`);
      this.shown = true;
      return;
    }
    const quarter = Math.floor(fraction * 4);
    if (quarter > this.lastQuarter) {
      this.lastQuarter = quarter;
      process.stderr.write(`${text}\n`);
    }
  }

  /** Clears the status line so other output starts on a clean line. */
  clear(): void {
    if (this.tty && this.shown) process.stderr.write('\r\x1b[2K');
    this.shown = false;
  }
}
