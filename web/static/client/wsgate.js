export class Client {}
