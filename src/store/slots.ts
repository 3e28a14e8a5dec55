/**
 * A count of slots that work holds while it runs: past `size` at once, work waits its turn (in
 * order of arrival) for at most `waitMs`, then is refused with `refusal()` without running.
 */
export class Slots {
  private free: number
  private readonly waiting: Array<() => void> = []

  constructor (size: number, private readonly waitMs: number, private readonly refusal: () => Error) {
    this.free = size
  }

  async hold<T> (work: () => Promise<T>): Promise<T> {
    if (this.free > 0) this.free--
    else await this.turn()
    try {
      return await work()
    } finally {
      const next = this.waiting.shift()
      if (next === undefined) this.free++
      else next() // the slot passes to the next in line
    }
  }

  private async turn (): Promise<void> {
    await new Promise<void>((resolve, reject) => {
      const go = (): void => { clearTimeout(timer); resolve() }
      const timer = setTimeout(() => {
        this.waiting.splice(this.waiting.indexOf(go), 1)
        reject(this.refusal())
      }, this.waitMs)
      this.waiting.push(go)
    })
  }
}
